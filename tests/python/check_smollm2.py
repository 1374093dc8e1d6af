#!/usr/bin/env python3
"""numpy_llama.py on SmolLM2-135M-Instruct (run by CTest, label `model`; skipped, exit 77,
when the model is absent). "The capital of France is" must continue with " Paris", and a
plain English sentence must have a low perplexity.
Token ids are the GPT-2-style vocabulary entries of the words ("The", "Ġcapital", ...), looked up
in the file's own tokenizer.ggml.tokens so the check does not depend on a tokenizer.
Usage: check_smollm2.py MODELS_DIR
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama  # noqa: E402


# "Paris is the capital and most populous city of France. The city is known for its museums,
# including the Louvre, and for the Eiffel Tower, which was built in 1889." encoded by the
# HF `tokenizers` byte-level BPE built from this file's tokenizer.ggml.tokens and merges.
TEXT_IDS = [38634, 314, 260, 3575, 284, 768, 35488, 2240, 282, 4649, 30, 378, 2240, 314, 1343,
            327, 624, 14739, 28, 1285, 260, 5991, 36462, 28, 284, 327, 260, 414, 46682, 18669,
            28, 527, 436, 2837, 281, 216, 33, 40, 40, 41, 30]


def main():
    path = os.path.join(sys.argv[1], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        # A missing model skips on a developer's machine and fails under CI=true.
        print("SKIP: [missing] no", path)
        sys.exit(1 if os.environ.get("CI") == "true" else 77)
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
    # Perplexity of a plain sentence. The right RoPE layout (normal, for GGUF llama) gives 4.26;
    # the NeoX layout gives 11.1, a wrong norm or head grouping far more.
    logits = numpy_llama.forward(m, TEXT_IDS)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    nll = -np.mean([logp[i, TEXT_IDS[i + 1]] for i in range(len(TEXT_IDS) - 1)])
    print(f"perplexity over {len(TEXT_IDS)} tokens: {np.exp(nll):.3f}")
    if not np.exp(nll) < 6.0:
        print("FAIL: perplexity should be under 6")
        sys.exit(1)


if __name__ == "__main__":
    main()
