#!/usr/bin/env python3
"""Generates tests/data/spm_golden.txt: a small SentencePiece BPE model (Llama 2 style:
byte fallback, dummy prefix, identity normalisation) trained here with the `sentencepiece`
package on a synthetic corpus, and the ids sentencepiece gives for test texts.

Format (hex-encoded UTF-8):
  V <type> <hex piece> : <score>     vocabulary in id order (GGUF token types)
  E 1 <hex text> : <ids...>          sentencepiece's encode
Run: python3 tests/tokenizer/gen_spm_golden.py > tests/data/spm_golden.txt
"""
import io
import random
import sys

import sentencepiece as spm

WORDS = ("the of and to in is was for on that with as by at from his her they this which "
         "hello world token piece merge score byte fallback llama model text encode decode "
         "running runner runs quick brown fox lazy dog jumped over under around 0 1 2 3 42 "
         "café naïve über straße").split()

TESTS = [
    "hello world", "Hello World", " leading space", "double  space", "trailing ",
    "the quick brown fox jumped over the lazy dog",
    "unknown chars: 日本語 🤗 ∑", "tabs\tand\nnewlines", "café über naïve", "",
    "x", "   ", "runrunrunning runners", "42 is 0 1 2 3", "ΩΩ", "a\u00a0b",
]


def corpus(seed=5):
    rng = random.Random(seed)
    lines = []
    for _ in range(3000):
        lines.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))))
    return lines


def main():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_writer=model, model_type="bpe", vocab_size=520,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, character_coverage=0.995, split_digits=True, minloglevel=2,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    out = []
    for i in range(sp.get_piece_size()):
        if sp.is_unknown(i): t = 2
        elif sp.is_control(i): t = 3
        elif sp.is_byte(i): t = 6
        elif sp.is_unused(i): t = 5
        else: t = 1
        out.append(f"V {t} {sp.id_to_piece(i).encode().hex()} : {sp.get_score(i)!r}")
    for text in TESTS:
        ids = sp.encode(text)
        assert sp.decode(ids) == text, (text, sp.decode(ids))
        out.append(f"E 1 {text.encode().hex()} : {' '.join(map(str, ids))}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
