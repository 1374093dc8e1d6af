#!/usr/bin/env python3
"""The scale-out contract of /metrics and /health (docs/scale-out.md), against a running
`tessera serve`: vLLM's metric names beside Tessera's, their # TYPE lines, the model_name label,
value ranges, counters and histograms that grow with requests; /health 503 while loading and
while draining after SIGTERM, 200 when ready.

Usage: test_metrics.py TESSERA_BIN_DIR [MODELS_DIR]
prometheus_client (requirements.txt) parses the text, as a Prometheus scraper would. Without it
the test exits 77 (CTest: skipped); under CI=true that is a failure (exit 1), and so is a missing
SmolLM2 (the drain case needs a stream that outlasts the signal).
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: the prometheus_client package is not installed (pip install -r requirements.txt)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Server, tiny_model  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TESSERA_BIN", "build/bin")
MODELS = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TESSERA_MODELS", "models-cache")

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:cache_config_info"]
COUNTERS = ["vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions", "vllm:prompt_tokens",
            "vllm:generation_tokens"]
HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"]


def family_name(name, typ):
    # prometheus_client names a counter's family without "_total"; be indifferent to its version.
    return name[:-6] if typ == "counter" and name.endswith("_total") else name


def scrape(port):
    """{family: (type, [(sample name, labels, value)])} and the raw text."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    assert r.status == 200, (r.status, text)
    fams = {}
    for f in text_string_to_metric_families(text):
        fams[family_name(f.name, f.type)] = (f.type, [(s.name, s.labels, s.value) for s in f.samples])
    return fams, text


def value(fams, name, suffix=""):
    typ, samples = fams[name]
    hits = [v for n, _, v in samples if n == name + suffix]
    assert len(hits) == 1, (name, suffix, samples)
    return hits[0]


def get(port, path):
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, body


def post(port, body, timeout=120):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    return r.status, data


class Readiness(unittest.TestCase):
    def test_health_is_503_while_loading_then_200(self):
        proc = subprocess.Popen([os.path.join(BIN, "tessera"), "serve", "-m", tiny_model(BIN), "-d", "cpu", "--host", HOST,
                                 "--port", "0", "--model-name", "tiny", "--debug-load-delay-ms", "3000"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            port = None
            for _ in range(200):  # the loading line comes before any model output
                line = proc.stderr.readline()
                m = re.search(r"serve: loading; http://[0-9.]+:(\d+)", line)
                if m or not line:
                    port = m and int(m.group(1))
                    break
            self.assertIsNotNone(port, "no 'serve: loading' line on stderr")
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            status, body = get(port, "/health")
            self.assertEqual((status, json.loads(body)["status"]), (503, "loading"))
            self.assertEqual(get(port, "/metrics")[0], 503)
            self.assertEqual(post(port, {"model": "tiny", "prompt": "hi", "max_tokens": 2})[0], 503)
            self.assertTrue(proc.stdout.readline().startswith("listening on"))
            status, body = get(port, "/health")
            self.assertEqual((status, json.loads(body)["status"]), (200, "ok"))
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(60), 0)
            proc.stdout.close()

    def test_health_is_503_while_draining(self):
        model = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
        if not os.path.exists(model):
            if os.environ.get("CI") == "true":
                raise AssertionError(f"[missing] {model} (run .ci/fetch-model)")
            raise unittest.SkipTest(f"[missing] {model}")
        server = Server(BIN, "--max-seqs", "1", "--shutdown-grace", "120", model=model)
        conn = http.client.HTTPConnection(HOST, server.port, timeout=120)
        body = {"model": "tiny", "prompt": "a long story", "max_tokens": 200, "ignore_eos": True, "temperature": 0, "stream": True}
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.readline()  # the stream has started
        server.proc.send_signal(signal.SIGTERM)
        seen = None
        deadline = time.time() + 10
        while time.time() < deadline:  # the signal is handled on the server's own thread
            status, text = get(server.port, "/health")
            if status != 200:
                seen = (status, json.loads(text)["status"])
                break
            time.sleep(0.02)
        self.assertEqual(seen, (503, "shutting_down"))
        self.assertEqual(post(server.port, {"model": "tiny", "prompt": "hi", "max_tokens": 2})[0], 503)
        events = [line for line in r.read().decode().split("\n") if line.startswith("data: ")]
        conn.close()
        self.assertEqual(events[-1], "data: [DONE]", "the stream in flight finished")
        self.assertEqual(json.loads(events[-2][6:])["choices"][0]["finish_reason"], "length")
        self.assertEqual(server.proc.wait(60), 0)
        server.stop()


class VllmNames(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(BIN)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def check_contract(self, fams, text):
        for name in GAUGES + COUNTERS + HISTOGRAMS:
            self.assertIn(name, fams, f"{name} missing from /metrics")
        for name in GAUGES:
            self.assertEqual(fams[name][0], "gauge", name)
        for name in COUNTERS:
            self.assertEqual(fams[name][0], "counter", name)
            self.assertIn(f"# TYPE {name}_total counter", text)
        for name in HISTOGRAMS:
            self.assertEqual(fams[name][0], "histogram", name)
        for name in GAUGES + COUNTERS + HISTOGRAMS:
            for sample, labels, v in fams[name][1]:
                self.assertEqual(labels.get("model_name"), "tiny", f"{sample}{labels}")
                self.assertGreaterEqual(v, 0, sample)
        self.assertLessEqual(value(fams, "vllm:kv_cache_usage_perc"), 1.0)
        (_, cfg, v), = fams["vllm:cache_config_info"][1]
        self.assertEqual(v, 1)
        self.assertEqual(cfg["block_size"], "16")
        self.assertGreater(int(cfg["num_gpu_blocks"]), 0)
        for name in HISTOGRAMS:
            buckets = [(float(labels["le"]), v) for s, labels, v in fams[name][1] if s == name + "_bucket"]
            self.assertEqual(buckets[-1][0], float("inf"), name)
            self.assertEqual([b for b, _ in buckets], sorted(b for b, _ in buckets), name)
            self.assertEqual([c for _, c in buckets], sorted(c for _, c in buckets), f"{name}: buckets are cumulative")
            self.assertEqual(buckets[-1][1], value(fams, name, "_count"), name)
        # Tessera's own names stay beside vLLM's.
        for own in ("tessera_requests_running", "tessera_kv_blocks_used", "tessera_prompt_tokens_total"):
            self.assertIn(f"# TYPE {own} ", text)

    def test_names_types_labels_and_ranges_when_idle(self):
        fams, text = scrape(self.server.port)
        self.check_contract(fams, text)
        self.assertEqual(value(fams, "vllm:num_requests_running"), 0)

    def test_counters_and_histograms_grow_with_requests(self):
        before, _ = scrape(self.server.port)
        prompt = list(range(40, 80))  # 40 token ids: two full 16-token blocks, the second request finds them cached
        for stream in (False, True):
            status, text = post(self.server.port, {"model": "tiny", "prompt": prompt, "max_tokens": 8, "ignore_eos": True,
                                                   "temperature": 0, "stream": stream})
            self.assertEqual(status, 200, text)
        after, text = scrape(self.server.port)
        self.check_contract(after, text)

        def grew(name, suffix=""):
            return value(after, name, suffix) - value(before, name, suffix)

        self.assertEqual(grew("vllm:prompt_tokens", "_total"), 80)
        self.assertEqual(grew("vllm:generation_tokens", "_total"), 16)
        self.assertGreaterEqual(grew("vllm:prefix_cache_queries", "_total"), 80)
        self.assertGreaterEqual(grew("vllm:prefix_cache_hits", "_total"), 32)
        self.assertLessEqual(value(after, "vllm:prefix_cache_hits", "_total"), value(after, "vllm:prefix_cache_queries", "_total"))
        self.assertEqual(grew("vllm:time_to_first_token_seconds", "_count"), 2)
        self.assertEqual(grew("vllm:e2e_request_latency_seconds", "_count"), 2)
        self.assertEqual(grew("vllm:inter_token_latency_seconds", "_count"), 14)  # 7 gaps per 8-token choice
        self.assertGreater(grew("vllm:e2e_request_latency_seconds", "_sum"), 0)
        self.assertEqual(value(after, "vllm:num_requests_running"), 0)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
