#!/usr/bin/env python3
"""numpy_llama.py on SmolLM2-135M-Instruct (run by CTest, label `model`; skipped, exit 77,
when the model is absent). "The capital of France is" must continue with " Paris".
Token ids are the GPT-2-style vocabulary entries of the words ("The", "Ġcapital", ...), looked up
in the file's own tokenizer.ggml.tokens so the check does not depend on a tokenizer.
Usage: check_smollm2.py MODELS_DIR
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402


def main():
    path = os.path.join(sys.argv[1], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        print("SKIP: no", path)
        sys.exit(77)
    m = numpy_llama.Model(path)
    vocab = m.vocab()
    index = {t: i for i, t in enumerate(vocab)}
    words = ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]
    ids = [index[w] for w in words]
    assert ids == [504, 3575, 282, 4649, 314], ids
    logits = numpy_llama.forward(m, ids)
    assert logits.shape == (5, 49152) and np.all(np.isfinite(logits))
    top = np.argsort(-logits[-1])[:5]
    print("top-5:", [(int(t), vocab[t], round(float(logits[-1][t]), 3)) for t in top])
    if vocab[top[0]] != "ĠParis":
        print("FAIL: expected ĠParis first")
        sys.exit(1)


if __name__ == "__main__":
    main()
