#!/usr/bin/env python3
"""Writes the fuzz seed corpora (tests/fuzz/corpus/<target>/) from real files and independent
writers (the PyPI `gguf` package for GGUF, json/numpy for the rest), so the seeds are not shaped
by our own writers' habits. Every seed is small (a few KiB) to keep libFuzzer fast.

  python3 tests/fuzz/make_seeds.py tests/fuzz/corpus [--models models-cache] [--tiny build-fuzz/bin/make_tiny_model]

The SmolLM2 GGUF (in --models) gives the real metadata, vocabulary (cut to its first tokens) and
chat template; tests/data gives chat templates, the SentencePiece vocabulary and text;
make_tiny_model (--tiny) writes the tiny models of the other architectures.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def put(out, name, data):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- GGUF reader seeds ----

def write_gguf(path, arch, kv, tensors, alignment=None):
    w = gguf.GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    for fn, key, val in kv:
        getattr(w, fn)(key, val)
    for name, arr, qtype in tensors:
        if qtype in (None, gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(name, arr)
        else:
            q = gguf.quants.quantize(arr, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_seeds(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    Q = gguf.GGMLQuantizationType
    every_kv = [
        ("add_uint8", "t.u8", 7), ("add_int8", "t.i8", -7), ("add_uint16", "t.u16", 700),
        ("add_int16", "t.i16", -700), ("add_uint32", "t.u32", 70000), ("add_int32", "t.i32", -70000),
        ("add_float32", "t.f32", 0.5), ("add_bool", "t.bool", True), ("add_string", "t.s", "hi"),
        ("add_uint64", "t.u64", 1 << 40), ("add_int64", "t.i64", -(1 << 40)),
        ("add_float64", "t.f64", 0.25), ("add_array", "t.arr", [1, 2, 3]),
        ("add_array", "t.sarr", ["a", "bb"]), ("add_array", "t.nested", [[1, 2], [3]]),
    ]
    write_gguf(f"{out}/kv_only.gguf", "llama", every_kv, [])
    write_gguf(f"{out}/tensors.gguf", "llama", [("add_uint32", "llama.block_count", 1)], [
        ("a.weight", rng.standard_normal((2, 32)).astype(np.float32), Q.F32),
        ("b.weight", rng.standard_normal((3, 8)).astype(np.float16), Q.F16),
        ("c.weight", rng.standard_normal((2, 64)).astype(np.float32), Q.Q8_0),
        ("d.weight", rng.standard_normal((1, 32)).astype(np.float32), Q.Q4_0),
        ("e.weight", rng.standard_normal((1, 32)).astype(np.float32), Q.Q4_1),
        ("f.weight", rng.standard_normal((2, 2, 2, 4)).astype(np.float32), Q.F32),
    ])
    write_gguf(f"{out}/aligned64.gguf", "qwen3", [("add_string", "general.name", "x")], [
        ("x", rng.standard_normal((4,)).astype(np.float32), Q.F32),
        ("y", rng.standard_normal((4,)).astype(np.float32), Q.F32),
    ], alignment=64)


# ---- SmolLM2: the real vocabulary, cut down ----

def smollm2(models):
    path = os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing (the SmolLM2 GGUF gives the real metadata seeds)")
    r = gguf.GGUFReader(path)
    meta = {}
    for k, f in r.fields.items():
        try:
            meta[k] = f.contents()
        except Exception:  # noqa: BLE001 - fields the package cannot decode are not needed
            pass
    return meta


def cut_vocab(meta, n):
    """The first |n| tokens and the merges among them (a merge's parts and result all kept)."""
    tokens = list(meta["tokenizer.ggml.tokens"])[:n]
    types = [int(t) for t in meta["tokenizer.ggml.token_type"]][:n]
    kept = set(tokens)
    merges = [m for m in meta["tokenizer.ggml.merges"]
              if all(p in kept for p in m.split(" ", 1)) and m.replace(" ", "", 1) in kept]
    return tokens, types, merges


def tiny_smollm2_gguf(path, meta, n_vocab=128):
    """SmolLM2's metadata (every non-tokenizer key as in the file) with shapes cut to dim 8, one
    layer, 2 heads / 1 KV head, FFN 16, and the first |n_vocab| tokens; f16 weights, tied output."""
    tokens, types, merges = cut_vocab(meta, n_vocab)
    dim, ff, heads, kv_heads = 8, 16, 2, 1
    hd = dim // heads
    sizes = {"llama.block_count": 1, "llama.embedding_length": dim, "llama.feed_forward_length": ff,
             "llama.attention.head_count": heads, "llama.attention.head_count_kv": kv_heads,
             "llama.vocab_size": n_vocab, "llama.rope.dimension_count": hd}
    w = gguf.GGUFWriter(path, "llama")
    for k, v in meta.items():
        if k.startswith("GGUF.") or k in ("general.architecture", "general.alignment") or k.startswith("tokenizer.ggml.") and k.endswith(("tokens", "token_type", "merges", "scores")):
            continue
        if k in sizes:
            w.add_uint32(k, sizes[k])
        elif isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, list) and all(isinstance(x, str) for x in v):
            w.add_array(k, v)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    rng = np.random.default_rng(1)
    def t(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float16)
    w.add_tensor("token_embd.weight", t(n_vocab, dim))
    w.add_tensor("output_norm.weight", np.ones(dim, np.float32))
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(dim, np.float32))
    w.add_tensor(p + "attn_q.weight", t(heads * hd, dim))
    w.add_tensor(p + "attn_k.weight", t(kv_heads * hd, dim))
    w.add_tensor(p + "attn_v.weight", t(kv_heads * hd, dim))
    w.add_tensor(p + "attn_output.weight", t(dim, heads * hd))
    w.add_tensor(p + "ffn_norm.weight", np.ones(dim, np.float32))
    w.add_tensor(p + "ffn_gate.weight", t(ff, dim))
    w.add_tensor(p + "ffn_up.weight", t(ff, dim))
    w.add_tensor(p + "ffn_down.weight", t(dim, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model_load_seeds(out, meta, tiny):
    os.makedirs(out, exist_ok=True)
    tiny_smollm2_gguf(os.path.join(out, "smollm2-cut.gguf"), meta)
    small = ["--dim", "8", "--heads", "2", "--kv-heads", "1", "--ff", "16", "--layers", "1", "--ctx", "64"]
    moe = ["--experts", "2", "--experts-used", "1", "--expert-ff", "8"]
    runs = {
        "tiny-llama-f16": ["--arch", "llama", "--dtype", "f16"] + small,
        "tiny-qwen3-f32": ["--arch", "qwen3", "--dtype", "f32"] + small,
        "tiny-mixtral-f16": ["--arch", "mixtral", "--dtype", "f16"] + small + moe,
        "tiny-qwen2moe-split-f16": ["--arch", "qwen2moe", "--dtype", "f16", "--expert-layout", "split"] + small + moe + ["--shared-ff", "8"],
        "tiny-qwen3moe-f16": ["--arch", "qwen3moe", "--dtype", "f16"] + small + moe,
        "tiny-olmoe-f16": ["--arch", "olmoe", "--dtype", "f16"] + small + moe,
        "tiny-llama-q4_0": ["--arch", "llama", "--dtype", "q4_0", "--dim", "32", "--heads", "2", "--kv-heads", "1",
                            "--ff", "32", "--layers", "1", "--ctx", "64"],
    }
    for name, args in runs.items():
        subprocess.run([tiny] + args + ["--out", os.path.join(out, name + ".gguf")], check=True)


# ---- safetensors ----

def st_file(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds(out):
    rng = np.random.default_rng(2)
    f32 = rng.standard_normal((2, 3)).astype(np.float32).tobytes()
    put(out, "mixed.safetensors", st_file([
        ("model.embed_tokens.weight", "F32", (2, 3), f32),
        ("model.norm.weight", "BF16", (4,), rng.integers(0, 255, 8, dtype=np.uint8).tobytes()),
        ("q.weight", "F8_E4M3", (2, 4), bytes(range(8))),
        ("q.weight_scale", "F32", (), struct.pack("<f", 0.5)),
        ("ids", "I64", (1, 2), struct.pack("<qq", 1, -1)),
        ("empty", "F16", (0, 4), b""),
    ], {"format": "pt"}))
    put(out, "every-dtype.safetensors", st_file([
        (d, d, (2,), bytes(range(2 * s))) for d, s in [
            ("BOOL", 1), ("U8", 1), ("I8", 1), ("I16", 2), ("U16", 2), ("F16", 2), ("BF16", 2), ("I32", 4),
            ("U32", 4), ("F32", 4), ("F64", 8), ("I64", 8), ("U64", 8), ("F8_E5M2", 1), ("F8_E8M0", 1)]]))
    put(out, "header-only.safetensors", st_file([], {"a": "b"}))


def index_seeds(out):
    put(out, "full.json", json.dumps({"metadata": {"total_size": 24},
                                      "weight_map": {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}, indent=2))
    put(out, "one-shard.json", json.dumps({"weight_map": {"z": "b.safetensors"}}))
    put(out, "wrong-shard.json", json.dumps({"weight_map": {"x": "b.safetensors"}}))


# ---- config.json / tokenizer.json ----

def config_seeds(out, meta):
    base = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": int(meta["llama.embedding_length"]), "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]), "num_attention_heads": int(meta["llama.attention.head_count"]),
        "num_key_value_heads": int(meta["llama.attention.head_count_kv"]),
        "max_position_embeddings": int(meta["llama.context_length"]), "rms_norm_eps": 1e-5,
        "rope_theta": float(meta["llama.rope.freq_base"]), "rope_scaling": None, "tie_word_embeddings": True,
        "vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    put(out, "smollm2.json", json.dumps(base, indent=2))
    put(out, "qwen3-yarn.json", json.dumps(dict(base, model_type="qwen3", head_dim=128, partial_rotary_factor=0.5,
                                                rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                              "original_max_position_embeddings": 4096})))
    put(out, "mixtral-awq.json", json.dumps(dict(base, model_type="mixtral", num_local_experts=8, num_experts_per_tok=2,
                                                 quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})))
    put(out, "qwen2moe-gptq.json", json.dumps(dict(base, model_type="qwen2_moe", num_experts=60, num_experts_per_tok=4,
                                                   moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                                                   rope_scaling={"type": "linear", "factor": 2.0},
                                                   quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 32,
                                                                        "desc_act": False, "checkpoint_format": "gptq_v2"})))
    put(out, "olmoe.json", json.dumps(dict(base, model_type="olmoe", num_experts=64, num_experts_per_tok=8,
                                           norm_topk_prob=False)))
    put(out, "llama3-rope.json", json.dumps(dict(base, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                                 "high_freq_factor": 4.0,
                                                                 "original_max_position_embeddings": 8192})))
    half = int(meta["llama.embedding_length"]) // int(meta["llama.attention.head_count"]) // 2
    put(out, "phi3-longrope.json", json.dumps(dict(base, model_type="phi3", sliding_window=2047, max_position_embeddings=131072,
                                                   original_max_position_embeddings=4096,
                                                   rope_scaling={"type": "longrope", "long_factor": [1.0 + i for i in range(half)],
                                                                 "short_factor": [1.0] * half})))


def tokenizer_json_seeds(out, meta):
    tokens, types, merges = cut_vocab(meta, 300)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": types[i] == 3} for i, t in enumerate(tokens) if types[i] in (3, 4)]
    def tok(pre, model_extra=None):
        m = {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False, "ignore_merges": False,
             "vocab": {t: i for i, t in enumerate(tokens)}, "merges": [x.split(" ", 1) for x in merges]}
        m.update(model_extra or {})
        return {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": pre,
                "post_processor": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}, "model": m}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    cfg = {"bos_token": tokens[1], "eos_token": {"content": tokens[2], "special": True}, "unk_token": tokens[0],
           "pad_token": tokens[2], "add_bos_token": False, "chat_template": meta["tokenizer.chat_template"]}
    smollm = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    put(out, "smollm2-cut.json", json.dumps(tok(smollm)) + "\0" + json.dumps(cfg))
    put(out, "gpt2-cut.json", json.dumps(tok(byte_level)))
    llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
    split = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False}, dict(byte_level, use_regex=False)]}
    put(out, "llama3-cut.json", json.dumps(tok(split, {"ignore_merges": True})) + "\0" +
        json.dumps({"bos_token": tokens[1], "add_bos_token": True, "chat_template": [{"name": "default", "template": "{{ x }}"}]}))
    # SentencePiece-style BPE with byte fallback (Llama 2 converted by transformers), from the
    # sentencepiece-trained vocabulary in tests/data.
    spm_tokens = []
    with open(os.path.join(DATA, "spm_golden.txt")) as f:
        for line in f:
            p = line.split()
            if len(p) >= 4 and p[0] == "V":
                spm_tokens.append(bytes.fromhex(p[2]).decode("utf-8", "replace"))
    spm_tokens = spm_tokens[:300]
    kept = set(spm_tokens)
    spm_merges = [[t[:i], t[i:]] for t in spm_tokens if len(t) > 1 for i in range(1, len(t))
                  if t[:i] in kept and t[i:] in kept][:200]
    spm = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                                              {"id": 1, "content": "<s>", "special": True},
                                              {"id": 2, "content": "</s>", "special": True}],
           "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                              {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
           "pre_tokenizer": None,
           "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}]},
           "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>",
                     "vocab": {t: i for i, t in enumerate(spm_tokens)}, "merges": spm_merges}}
    put(out, "spm-fallback.json", json.dumps(spm) + "\0" + json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}))


# ---- tokenizer text, chat templates ----

def tokenizer_text_seeds(out):
    texts = []
    with open(os.path.join(DATA, "tokenizer_golden.txt")) as f:
        for line in f:
            p = line.split()
            if len(p) >= 3 and p[0] in ("E", "P"):
                texts.append(bytes.fromhex(p[2]))
    texts = sorted(set(texts), key=len)[:40]
    with open(os.path.join(DATA, "text", "alice_ch1.txt"), "rb") as f:
        alice = f.read()
    texts += [alice[i:i + 400] for i in range(0, 2400, 400)]
    texts += ["<|im_start|>user\nHi<|im_end|>\n<s> </s> <unk>".encode(), b"\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98\x80 ok",
              " \u2581 lead  spaces\t\n\r\n".encode(), "12345 0.5 \u00e9\u0301 \u4f60\u597d \U0001F600".encode()]
    for i, t in enumerate(texts):
        put(out, f"text-{i:02d}", bytes([i % 8]) + t)


def chat_template_seeds(out, meta):
    sources = {"smollm2": meta["tokenizer.chat_template"]}
    d = os.path.join(DATA, "chat_templates")
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name)) as f:
            sources[name.split(".")[0]] = f.read()
    convo = [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello! {{ x }}"), ("user", "<|im_end|> again")]
    for name, src in sources.items():
        put(out, name + ".jinja", src)
        put(out, name + "-messages", src + "\0\1" + "".join(f"{r}\0{c}\0" for r, c in convo))


def server_request_seeds(out):
    """JSON bodies of /v1/completions and /v1/chat/completions as OpenAI clients send them."""
    bodies = {
        "completion": {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
        "completion-ids": {"prompt": [1, 40, 41, 42], "max_tokens": 4, "stop": ["\n", "."], "seed": 7, "n": 2,
                           "logprobs": 2, "top_p": 0.9, "presence_penalty": 0.5, "frequency_penalty": -0.5},
        "completion-stream": {"prompt": ["one string"], "stream": True, "stream_options": {"include_usage": True},
                              "max_tokens": 3, "ignore_eos": True, "priority": 2, "stop": "x"},
        "chat": {"model": "smollm2", "messages": [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": "Hi <|im_end|>"}],
                 "max_completion_tokens": 16, "temperature": 0.7, "logprobs": True, "top_logprobs": 3},
        "chat-parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                    {"role": "assistant", "content": None}, {"role": "user", "content": "c"}],
                       "stream": True, "n": 1, "seed": 1},
        "wrong-model": {"model": "gpt-4", "prompt": "x"},
        "bad-types": {"prompt": 5, "max_tokens": "8", "temperature": "hot", "stop": [1]},
        # Structured output and tools (server/structured.cpp): every way a client constrains the output.
        "chat-tools-named": {"messages": [{"role": "user", "content": "Weather in Paris?"}],
                             "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                       "required": ["city"]}}},
                                       {"type": "function", "function": {"name": "noop"}}],
                             "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        "chat-tools-required": {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                                "tools": [{"type": "function", "function": {"name": "f", "parameters": None}}]},
        "chat-response-format": {"messages": [{"role": "user", "content": "JSON please"}], "spec_k": 3,
                                 "response_format": {"type": "json_schema", "json_schema": {"name": "o", "strict": True,
                                     "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}},
        "completion-json-object": {"prompt": "{", "response_format": {"type": "json_object"}},
        "completion-regex": {"prompt": "Phone: ", "structured_outputs": {"regex": "[0-9]{3}-[0-9]{4}"}},
        "completion-grammar": {"prompt": "a", "structured_outputs": {"grammar": "root ::= \"yes\" | \"no\""},
                               "max_tokens": 2},
        "completion-schema-string": {"prompt": "a", "structured_outputs": {"json": "{\"type\": \"string\"}",
                                                                           "json_object": None}},
    }
    for name, b in bodies.items():
        put(out, name + ".json", json.dumps(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="models-cache")
    ap.add_argument("--tiny", default="build-fuzz/bin/make_tiny_model")
    a = ap.parse_args()
    meta = smollm2(a.models)
    gguf_seeds(os.path.join(a.out, "gguf"))
    model_load_seeds(os.path.join(a.out, "model_load"), meta, a.tiny)
    safetensors_seeds(os.path.join(a.out, "safetensors"))
    index_seeds(os.path.join(a.out, "safetensors_index"))
    config_seeds(os.path.join(a.out, "hf_config"), meta)
    tokenizer_json_seeds(os.path.join(a.out, "hf_tokenizer"), meta)
    tokenizer_text_seeds(os.path.join(a.out, "tokenizer"))
    chat_template_seeds(os.path.join(a.out, "chat_template"), meta)
    server_request_seeds(os.path.join(a.out, "server_request"))


if __name__ == "__main__":
    main()
