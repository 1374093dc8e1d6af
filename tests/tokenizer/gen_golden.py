#!/usr/bin/env python3
"""Generates tests/data/tokenizer_golden.txt: golden token ids for SmolLM2's tokenizer and
golden pre-tokenizer splits, from Hugging Face `tokenizers` (pip install tokenizers gguf).

`transformers`' GGUF loader needs torch, and for pre 'smollm' it would use plain GPT-2
splitting, not SmolLM2's real tokenizer.json. So this rebuilds that tokenizer.json's pipeline
from the GGUF: BPE over the GGUF vocab/merges, pre-tokenizer Digits(individual_digits) +
ByteLevel(add_prefix_space=False), the 17 control tokens as special added tokens.

Format, one record per line, text fields hex-encoded UTF-8:
  E <0|1 parse_special> <hex text> : <ids...>      encode, add_special=False
  P <pre name> <hex text> : <hex piece> ...        pre-tokenizer pieces
Run: python3 tests/tokenizer/gen_golden.py models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import random
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see—don't worry!",
    "  leading spaces and trailing   ",
    "tabs\tand\t\tnewlines\n\n\nend\r\nCRLF \n \n",
    "Numbers: 0 7 42 123 1234 12345 3.14159 -17 1e-9 1,000,000 ²³ ٣٤٥ ５６",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n-1) + fib(n-2)\n",
    "int main() { std::vector<int> v{1, 2, 3}; for (auto& x : v) x *= 2; return 0; }",
    "SHOUTING CONTRACTIONS: I'M, YOU'RE, WE'LL, THEY'VE, IT'S, HE'D, DON'T. Mixed 'Re 'lL",
    "Français: où est la bibliothèque? Ça coûte 5€. Straße, Ærø, Øresund.",
    "Русский текст: Привет, мир! Как дела?",
    "中文：你好，世界！我们今天去公园散步吧。",
    "日本語のテキスト、カタカナとひらがな。東京タワー。",
    "한국어 문장입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم", "हिन्दी: नमस्ते दुनिया", "Ελληνικά: Γειά σου Κόσμε",
    "Emoji: 🤗😀👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨🔥",
    "Mixed\u00a0nbsp\u2003em-space\u3000ideographic\u2028line-sep",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "<|endoftext|><|im_start|><|im_end|><|im_start|>",
    "almost special <|im_star|> <im_start|> <|im_start",
    "URL: https://example.com/path?q=1&r=two#frag email: a.b+c@d.co",
    "JSON: {\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "Markdown **bold** _italic_ `code` # Heading\n- item 1\n- item 2\n> quote",
    "               many spaces",
    "\n\n\n\n\n\n\n\n",
    " ",
    "a",
    "'s 't 're 've 'm 'll 'd ''s",
    "x" * 300,
    "ab" * 100 + " " * 50 + "\n" * 20,
    "$$$ ### ... --- ___ +++ === ~~~ ^^^ |||",
    "Zero-width: a\u200bb\u200cc\u200dd\ufeffe",
    "combining: e\u0301 a\u0308 n\u0303 (NFD) vs é ä ñ (NFC)",
]

FRAGMENTS = ["the", " cat", "Hello", "WORLD", "'s", "'LL", "123", "4567", "3.5", " ", "  ", "\t",
             "\n", "\r\n", "!", "?!", "...", "—", "é", "日本", "🤗", "👍🏽", "\u00a0", "٣", "²",
             "<|im_start|>", "<|im_end|>", "abc", "_x", "(", ")", "{", "}", "//", "#", "Ω", "ß"]


def random_corpus(n, seed=1234):
    rng = random.Random(seed)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 25))) for _ in range(n)]


def build_smollm(path):
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
    f = r.fields["tokenizer.ggml.merges"]
    merges = [tuple(bytes(f.parts[i]).decode("utf-8").split(" ", 1)) for i in f.data]
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == 3])
    return tok


def hx(s):
    return s.encode("utf-8").hex()


def main():
    tok = build_smollm(sys.argv[1])
    splitters = {
        "gpt2": pre_tokenizers.Split(Regex(GPT2), behavior="isolated"),
        "llama-bpe": pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        "qwen2": pre_tokenizers.Split(Regex(QWEN2), behavior="isolated"),
        "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                           pre_tokenizers.Split(Regex(GPT2), behavior="isolated")]),
    }
    texts = CORPUS + random_corpus(100)
    out = []
    for text in texts:
        for parse_special in (1, 0):
            tok.encode_special_tokens = not parse_special
            ids = tok.encode(text, add_special_tokens=False).ids
            assert tok.decode(ids, skip_special_tokens=False) == text or not parse_special
            out.append(f"E {parse_special} {hx(text)} : {' '.join(map(str, ids))}")
        for name, sp in splitters.items():
            pieces = [p for p, _ in sp.pre_tokenize_str(text)]
            assert "".join(pieces) == text
            out.append(f"P {name} {hx(text)} : {' '.join(hx(p) for p in pieces)}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
