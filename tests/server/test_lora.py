#!/usr/bin/env python3
"""LoRA adapters through `tessera serve --lora NAME=PATH` (docs/lora.md, issue 41): both
dialects select an adapter (vLLM's "model": NAME, llama.cpp's "lora": [{"id", "scale"}]), requests
of different adapters and of the base model batched together get the tokens each gets alone,
/v1/models lists the adapters with their parent, GET /lora-adapters their ids (POST sets the adapter
of requests naming none, llama.cpp's global scales), /metrics has
vllm:lora_requests_info, the prefix cache keeps adapters apart (cached_tokens), the KV events carry
lora_id and lora_name with the hashes docs/scale-out.md defines (test_kv_events.py writes them down), and bad requests and flags get
errors that name the problem.

The adapters are tests/model/lora/make_lora.py's (random, r 8 over every projection and r 4
rsLoRA over q and v) for a tiny random f32 llama.

Usage: test_lora.py TESSERA_BIN_DIR
pyzmq, msgpack, numpy, gguf and safetensors come from requirements.txt: without them the test exits
77 (CTest: skipped); under CI=true that is a failure (exit 1).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import msgpack
    import zmq
    import numpy  # noqa: F401  (make_lora.py)
    import gguf  # noqa: F401
    import safetensors  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e.name} is not installed (pip install -r requirements.txt)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import HOST, Server  # noqa: E402
from test_kv_events import free_port, prompt_hashes  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TESSERA_BIN", "build/bin")


def make_fixture():
    d = tempfile.mkdtemp(prefix="tessera_lora_server_")
    base = os.path.join(d, "tiny-f32.gguf")
    subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "f32", "--seed", "11", "--out", base],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "model", "lora", "make_lora.py"), base, d], check=True,
                   capture_output=True)
    return d, base


DIR, BASE = make_fixture()


def concurrently(n, fn):
    """[fn(0), ..., fn(n - 1)], each call on a thread of its own, all started before any is joined."""
    results = [None] * n

    def run(i):
        results[i] = fn(i)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


class ServeLora(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pub_port = free_port()
        cls.zctx = zmq.Context()
        cls.sub = cls.zctx.socket(zmq.SUB)
        cls.sub.setsockopt(zmq.SUBSCRIBE, b"")
        cls.sub.connect(f"tcp://{HOST}:{cls.pub_port}")
        cls.server = Server(BIN, "--lora", f"styled={DIR}/adapter-a", "--lora", f"terse={DIR}/adapter-b",
                            "--kv-events", f"tcp://{HOST}:{cls.pub_port}", model=BASE)
        time.sleep(0.5)  # ZeroMQ's slow joiner

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.sub.close()
        cls.zctx.destroy(linger=0)

    def complete(self, prompt, want_status=200, **fields):
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 8, "ignore_eos": True, "temperature": 0}
        body.update(fields)
        status, _, out = self.server.post("/v1/completions", body)
        self.assertEqual(status, want_status, json.dumps(out))
        return out

    def tokens(self, prompt, **fields):
        out = self.complete(prompt, logprobs=0, **fields)
        return out["choices"][0]["logprobs"]["tokens"], out["usage"]

    def test_models_and_adapter_lists(self):
        _, _, body = self.server.raw("GET", "/v1/models")
        data = {m["id"]: m for m in json.loads(body)["data"]}
        self.assertEqual(set(data), {"tiny", "styled", "terse"})
        self.assertIsNone(data["tiny"]["parent"])
        self.assertEqual(data["styled"]["parent"], "tiny")
        self.assertEqual(data["terse"]["root"], f"{DIR}/adapter-b")
        status, _, body = self.server.raw("GET", "/lora-adapters")
        self.assertEqual(status, 200)
        self.assertEqual([(a["id"], a["name"], a["rank"]) for a in json.loads(body)], [(0, "styled", 8), (1, "terse", 4)])

    def test_dialects_select_the_same_adapter_and_batch_together(self):
        prompts = ["Once upon", "The quick brown fox", "abc", "Hello there, friend"]
        models = ["styled", "tiny", "terse", "styled"]
        alone = [self.tokens(p, model=m)[0] for p, m in zip(prompts, models)]
        self.assertNotEqual(self.tokens("Once upon")[0], alone[0], "the adapter changes the tokens")
        self.assertNotEqual(self.tokens("Once upon", model="terse")[0], alone[0])
        # llama.cpp's dialect: the adapter by id at scale 1; scale 0 (or left out) is off.
        self.assertEqual(self.tokens("Once upon", lora=[{"id": 0, "scale": 1.0}])[0], alone[0])
        self.assertEqual(self.tokens("Once upon", model="styled", lora=[{"id": 0, "scale": 1}, {"id": 1, "scale": 0}])[0],
                         alone[0])
        self.assertEqual(self.tokens("Once upon", lora=[{"id": 0, "scale": 0}])[0], self.tokens("Once upon")[0])
        # All four at once, twice over: each request's tokens are its own adapter's.
        results = concurrently(8, lambda i: self.tokens(prompts[i % 4], model=models[i % 4])[0])
        for i in range(8):
            self.assertEqual(results[i], alone[i % 4], f"request {i} under {models[i % 4]}")

    def test_prefix_cache_and_kv_events_keep_adapters_apart(self):
        prompt = list(range(40, 80))  # 40 token ids: 2 full blocks
        _, u1 = self.tokens(prompt, model="styled")
        _, u2 = self.tokens(prompt, model="terse")
        _, u3 = self.tokens(prompt)
        _, u4 = self.tokens(prompt, model="styled")
        self.assertEqual(u2["prompt_tokens_details"]["cached_tokens"], 0, "terse must not read styled's K/V")
        self.assertEqual(u3["prompt_tokens_details"]["cached_tokens"], 0, "nor the base model")
        self.assertEqual(u4["prompt_tokens_details"]["cached_tokens"], 32, "styled finds its own blocks")
        want = {i: prompt_hashes(prompt, i) for i in (0, 1, 2)}
        names = {1: "styled", 2: "terse"}
        seen = {}
        deadline = time.time() + 20
        while time.time() < deadline and len(seen) < 3:
            if not self.sub.poll(100):
                continue
            _, _, payload = self.sub.recv_multipart()
            for e in msgpack.unpackb(payload, raw=False)[1]:
                if e[0] != "BlockStored":
                    continue
                for lora_id, hashes in want.items():
                    if hashes[0] in e[1]:
                        seen[lora_id] = e
        self.assertEqual(set(seen), {0, 1, 2}, f"a BlockStored for each chain: {seen}")
        for lora_id, e in seen.items():
            self.assertEqual(e[1][:2], want[lora_id], "the documented hashes, with the adapter mixed in")
            if lora_id == 0:
                self.assertEqual(len(e), 7, e)
                self.assertIsNone(e[5])
            else:
                self.assertEqual(e[5], lora_id)
                self.assertEqual(e[6:], ["GPU", names[lora_id]])

    def test_kv_events_name_an_adapter_at_another_scale(self):
        # A scale other than 1 is a variant with K/V of its own: its blocks are stored under a
        # variant id in [2^30, 2^31), and the events still name the adapter.
        prompt = list(range(90, 130))  # 2 full blocks no other test uses
        self.tokens(prompt, lora=[{"id": 1, "scale": 0.25}])
        found = None
        deadline = time.time() + 20
        while time.time() < deadline and found is None:
            if not self.sub.poll(100):
                continue
            _, _, payload = self.sub.recv_multipart()
            for e in msgpack.unpackb(payload, raw=False)[1]:
                if e[0] == "BlockStored" and e[3][:16] == prompt[:16]:
                    found = e
        self.assertIsNotNone(found, "no BlockStored for the prompt's first block")
        self.assertGreaterEqual(found[5], 1 << 30, f"a variant id: {found}")
        self.assertEqual(found[6:], ["GPU", "terse"], found)

    def test_global_scales_choose_the_adapter_of_requests_naming_none(self):
        base = self.tokens("Once upon")[0]
        styled = self.tokens("Once upon", model="styled")[0]
        terse = self.tokens("Once upon", model="terse")[0]
        status, _, out = self.server.post("/lora-adapters", [{"id": 0, "scale": 1}, {"id": 1, "scale": 0}])
        self.assertEqual((status, out), (200, {"success": True}))
        try:
            self.assertEqual(self.tokens("Once upon")[0], styled, "a request naming none runs under adapter 0")
            scales = {a["id"]: a["scale"] for a in json.loads(self.server.raw("GET", "/lora-adapters")[2])}
            self.assertEqual(scales, {0: 1.0, 1: 0.0})
            self.assertEqual(self.tokens("Once upon", lora=[])[0], base, "a request's own list replaces the global one")
            self.assertEqual(self.tokens("Once upon", model="terse")[0], terse)
            for body, want in (([{"id": 0, "scale": -1e6}], "a scale is a finite number"),
                               ([{"id": 9, "scale": 1}], "no adapter has id 9"),
                               ([{"id": 0, "scale": 1}, {"id": 1, "scale": 1}], "only one adapter can be on"),
                               ({"id": 0}, "must be a JSON array"), ([{"scale": 1}], "each entry must be an object")):
                status, _, out = self.server.post("/lora-adapters", body)
                self.assertEqual(status, 400, out)
                self.assertIn(want, out["error"]["message"])
            self.assertEqual(self.tokens("Once upon")[0], styled, "a refused update changes nothing")
            # Another scale: requests naming none get the adapter at it, as a request giving it.
            half = self.tokens("Once upon", lora=[{"id": 1, "scale": 0.5}])[0]
            self.assertEqual(self.server.post("/lora-adapters", [{"id": 1, "scale": 0.5}])[0], 200)
            scales = {a["id"]: a["scale"] for a in json.loads(self.server.raw("GET", "/lora-adapters")[2])}
            self.assertEqual(scales, {0: 0.0, 1: 0.5})
            self.assertEqual(self.tokens("Once upon")[0], half)
        finally:
            status, _, _ = self.server.post("/lora-adapters", [])
            self.assertEqual(status, 200)
        self.assertEqual(self.tokens("Once upon")[0], base)

    def test_metrics_list_the_adapters(self):
        text = self.server.raw("GET", "/metrics")[2]
        line = next((ln for ln in text.splitlines() if ln.startswith("vllm:lora_requests_info{")), None)
        self.assertIsNotNone(line, text[-2000:])
        self.assertIn('max_lora="2"', line)
        self.assertIn('running_lora_adapters=""', line)
        self.assertGreater(float(line.rsplit(" ", 1)[1]), 1.6e9)

    def test_bad_requests_name_the_problem(self):
        out = self.complete("x", want_status=404, model="nobody")
        self.assertIn("'tiny', 'styled', 'terse'", out["error"]["message"])
        out = self.complete("x", want_status=400, lora=[{"id": 7, "scale": 1}])
        self.assertIn("no adapter has id 7", out["error"]["message"])
        out = self.complete("x", want_status=400, lora=[{"id": 0, "scale": 1e9}])
        self.assertIn("a scale is a finite number within +-100", out["error"]["message"])
        out = self.complete("x", want_status=400, lora=[{"id": 0, "scale": 1}, {"id": 1, "scale": 1}])
        self.assertIn("one adapter per request", out["error"]["message"])
        out = self.complete("x", want_status=400, model="terse", lora=[{"id": 0, "scale": 1}])
        self.assertIn("'model' names adapter 'terse'", out["error"]["message"])
        out = self.complete("x", want_status=400, lora={"id": 0})
        self.assertIn("must be an array", out["error"]["message"])
        # The server still answers.
        self.tokens("still fine", model="terse")


class RuntimeUpdates(unittest.TestCase):
    """vLLM's POST /v1/load_lora_adapter and /v1/unload_lora_adapter behind --allow-runtime-lora-updates."""

    def setUp(self):
        self.server = Server(BIN, "--lora", f"styled={DIR}/adapter-a", "--allow-runtime-lora-updates", "--max-loras", "2",
                             model=BASE)

    def tearDown(self):
        self.server.stop()

    def call(self, path, body):
        status, _, text = self.server.raw("POST", path, json.dumps(body))
        return status, text

    def tokens(self, prompt, model, want_status=200):
        status, _, out = self.server.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 24,
                                                              "ignore_eos": True, "temperature": 0, "logprobs": 0})
        self.assertEqual(status, want_status, json.dumps(out))
        return (out["choices"][0]["logprobs"]["tokens"], out["usage"]) if status == 200 else out

    def test_load_use_unload_reload(self):
        prompt = list(range(60, 100))  # 2 full blocks
        styled, _ = self.tokens(prompt, "styled")
        # A load while a request runs leaves that request's tokens as they were.
        during = {}
        t = threading.Thread(target=lambda: during.update(out=self.tokens(prompt, "styled")[0]))
        t.start()
        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "terse", "lora_path": f"{DIR}/adapter-b"})
        t.join()
        self.assertEqual(status, 200, text)
        self.assertIn("added successfully", text)
        self.assertEqual(during["out"], styled)
        models = [m["id"] for m in json.loads(self.server.raw("GET", "/v1/models")[2])["data"]]
        self.assertEqual(models, ["tiny", "styled", "terse"])
        terse, _ = self.tokens(prompt, "terse")
        self.assertNotEqual(terse, styled)
        _, _, body = self.server.post("/v1/completions", {"prompt": prompt, "max_tokens": 24, "ignore_eos": True, "temperature": 0,
                                                          "logprobs": 0, "lora": [{"id": 1, "scale": 1}]})
        self.assertEqual(body["choices"][0]["logprobs"]["tokens"], terse, "llama.cpp's id of the new adapter is its slot")

        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "terse", "lora_path": f"{DIR}/adapter-b"})
        self.assertEqual(status, 400)
        self.assertIn("already loaded", text)
        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "third", "lora_path": f"{DIR}/adapter-b"})
        self.assertEqual(status, 400)
        self.assertIn("--max-loras allows (2)", text)

        status, text = self.call("/v1/unload_lora_adapter", {"lora_name": "terse"})
        self.assertEqual(status, 200, text)
        self.assertIn("removed successfully", text)
        self.assertIn("does not exist", self.tokens(prompt, "terse", want_status=404)["error"]["message"])
        status, text = self.call("/v1/unload_lora_adapter", {"lora_name": "terse"})
        self.assertEqual(status, 404)
        self.assertIn("not loaded", text)

        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": f"{DIR}/nowhere"})
        self.assertEqual(status, 400)
        self.assertIn("nowhere", text)
        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "x"})
        self.assertEqual(status, 400)
        self.assertIn("lora_path", text)
        # Another adapter takes the freed slot: it must not find the unloaded one's K/V.
        status, text = self.call("/v1/load_lora_adapter", {"lora_name": "again", "lora_path": f"{DIR}/adapter-a"})
        self.assertEqual(status, 200, text)
        ids = [(a["id"], a["name"]) for a in json.loads(self.server.raw("GET", "/lora-adapters")[2])]
        self.assertEqual(ids, [(0, "styled"), (1, "again")])
        again, usage = self.tokens(prompt, "again")
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0, "a new adapter in an old slot starts cold")
        self.assertEqual(again, styled, "the same weights as styled give its tokens")
        _, usage = self.tokens(prompt, "styled")
        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 32)
        # The adapter of requests that name none (POST /lora-adapters) is not unloaded under them.
        self.assertEqual(self.server.post("/lora-adapters", [{"id": 0, "scale": 1}])[0], 200)
        status, text = self.call("/v1/unload_lora_adapter", {"lora_name": "styled"})
        self.assertEqual(status, 409)
        self.assertIn("turn it off first", text)
        self.assertEqual(self.server.post("/lora-adapters", [])[0], 200)
        status, text = self.call("/v1/unload_lora_adapter", {"lora_name": "styled"})
        self.assertEqual(status, 200, text)

    def test_off_without_the_flag(self):
        other = Server(BIN, "--lora", f"styled={DIR}/adapter-a", model=BASE)
        try:
            status, _, text = other.raw("POST", "/v1/load_lora_adapter",
                                        json.dumps({"lora_name": "t", "lora_path": f"{DIR}/adapter-b"}))
            self.assertEqual(status, 404)
            self.assertIn("--allow-runtime-lora-updates", text)
        finally:
            other.stop()


class OneDeviceSlot(unittest.TestCase):
    """--max-loras 1 --max-cpu-loras 2: two adapters share one device slot. Requests of both and of
    the base model sent together all complete with the tokens each gets alone: a request whose
    adapter finds the slot taken waits for it (never dropped), and the adapters take turns."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(BIN, "--lora", f"styled={DIR}/adapter-a", "--lora", f"terse={DIR}/adapter-b",
                            "--max-loras", "1", "--max-cpu-loras", "2", model=BASE)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def tokens(self, prompt, model):
        status, _, out = self.server.post("/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 12,
                                                              "ignore_eos": True, "temperature": 0, "logprobs": 0})
        self.assertEqual(status, 200, json.dumps(out))
        return out["choices"][0]["logprobs"]["tokens"]

    def test_adapters_take_turns_in_one_slot(self):
        prompts = ["Once upon", "The quick brown fox", "abc", "Hello there, friend", "zz top"]
        models = ["styled", "terse", "tiny", "terse", "styled"]
        alone = [self.tokens(p, m) for p, m in zip(prompts, models)]
        self.assertNotEqual(self.tokens(prompts[0], "terse"), alone[0], "the adapters differ")
        results = concurrently(10, lambda i: self.tokens(prompts[i % 5], models[i % 5]))
        for i in range(10):
            self.assertEqual(results[i], alone[i % 5], f"request {i} under {models[i % 5]}")
        text = self.server.raw("GET", "/metrics")[2]
        line = next((ln for ln in text.splitlines() if ln.startswith("vllm:lora_requests_info{")), "")
        self.assertIn('max_lora="1"', line)


class ServeLoraFlags(unittest.TestCase):
    def start_fails(self, *flags):
        try:
            s = Server(BIN, *flags, model=BASE)
        except RuntimeError as e:
            return str(e)
        # The server binds first and loads after: the failure shows at exit.
        return s.stop(want_rc=None)

    def test_bad_flags(self):
        self.assertIn("rank 8, above --max-lora-rank 4",
                      self.start_fails("--lora", f"a={DIR}/adapter-a", "--max-lora-rank", "4"))
        self.assertIn("--max-loras allows (1)",
                      self.start_fails("--lora", f"a={DIR}/adapter-a", "--lora", f"b={DIR}/adapter-b", "--max-loras", "1"))
        self.assertIn("--max-cpu-loras allows (1)",
                      self.start_fails("--lora", f"a={DIR}/adapter-a", "--lora", f"b={DIR}/adapter-b", "--max-cpu-loras", "1"))
        self.assertIn("is below --max-loras 2", self.start_fails("--max-loras", "2", "--max-cpu-loras", "1"))
        self.assertIn("--lora wants NAME=PATH", self.start_fails("--lora", f"{DIR}/adapter-a"))
        self.assertIn("bad-shape", self.start_fails("--lora", f"x={DIR}/bad-shape"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
