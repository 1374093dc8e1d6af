#!/usr/bin/env python3
"""One-off check (needs torch and llama.cpp's sources, so not in CI): make_gemma4.py's GGUF is
byte-for-byte what llama.cpp's convert_hf_to_gguf.py --outtype f32 writes for its HF checkpoint.
The converter reads the vocabulary through transformers' tokenizer, which the tiny checkpoint does
not carry: its set_vocab is replaced by one writing make_gemma4.py's vocabulary keys, so the check
covers every model key and tensor (names, order, shapes, types, bytes). The converter also cuts
token_embd to the tokenizer.json vocabulary's size (Gemma3Model.modify_tensors): a tokenizer.json
listing make_gemma4.py's tokens is written into the checkpoint folder for that.
Usage: check_vs_converter.py LLAMA_CPP_SRC DIR (make_gemma4.py's output folder, all three variants)
"""
import filecmp
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    src, d = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    sys.path.insert(0, src)
    sys.path.insert(0, HERE)
    import make_gemma4
    import conversion.gemma as cg

    def set_vocab(self):
        s = make_gemma4.Spec(make_gemma4.parse_args(["--out", d]))
        toks = make_gemma4.vocab_tokens(s)
        n_real = len(make_gemma4.SPECIAL) + 256 + len(make_gemma4.LETTERS)
        w = self.gguf_writer
        w.add_tokenizer_model("gemma4")
        w.add_token_list(toks)
        w.add_token_scores([0.0] * len(toks))
        w.add_token_types([3] * len(make_gemma4.SPECIAL) + [6] * 256 + [1] * len(make_gemma4.LETTERS) + [4] * (len(toks) - n_real))
        w.add_token_merges(make_gemma4.MERGES)
        w.add_bos_token_id(2)
        w.add_eos_token_id(1)
        w.add_unk_token_id(3)
        w.add_pad_token_id(0)
        w.add_add_space_prefix(False)
        w.add_add_bos_token(True)
    cg.Gemma4Model.set_vocab = set_vocab
    ok = True
    import json
    for stem in ("tiny-gemma4", "tiny-gemma4-31b", "tiny-gemma4-26b"):
        s = make_gemma4.Spec(make_gemma4.parse_args(["--out", d]))
        with open(os.path.join(d, stem + "-hf", "tokenizer.json"), "w") as f:
            json.dump({"model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(make_gemma4.vocab_tokens(s))}},
                       "added_tokens": []}, f)
        out = os.path.join(d, stem + "-converter.gguf")
        sys.argv = ["convert_hf_to_gguf.py", os.path.join(d, stem + "-hf"), "--outtype", "f32", "--outfile", out]
        try:
            runpy.run_path(os.path.join(src, "convert_hf_to_gguf.py"), run_name="__main__")
        except SystemExit as e:
            if e.code:
                raise
        same = filecmp.cmp(out, os.path.join(d, stem + "-f32.gguf"), shallow=False)
        print(f"{stem}: {'byte-identical' if same else 'DIFFERENT'} ({os.path.getsize(out)} bytes)")
        ok = ok and same
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
