#!/usr/bin/env python3
"""Two `tessera serve` replicas (SmolLM2, CPU, one thread each) behind vllm-router (the venv's,
from requirements.txt), all on 127.0.0.1: multi-turn sessions complete through the router, and a
replica killed mid-run loses no request: its streams in flight end with an error, the others'
finish, new requests go to the survivor, nothing hangs. Timings are not asserted
(bench/scaleout/router_bench.py prints the figures).

Usage: test_router.py TESSERA_BIN_DIR MODELS_DIR
A missing vllm-router or SmolLM2 exits 77 (CTest: skipped); under CI=true that is a failure.
"""
import os
import sys
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "scaleout"))
from fleet import Replica, Router, chat_stream, run_sessions  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/bin"
MODELS = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TESSERA_MODELS", "models-cache")
MODEL = os.path.join(MODELS, "SmolLM2-135M-Instruct.Q4_1.gguf")
ROUTER = os.path.join(os.path.dirname(sys.executable), "vllm-router")
for path, what in ((ROUTER, "vllm-router (pip install -r requirements.txt into this interpreter's venv)"), (MODEL, "SmolLM2")):
    if not os.path.exists(path):
        print(f"SKIP: {path} not found: {what}")
        sys.exit(1 if os.environ.get("CI") == "true" else 77)


class Fleet(unittest.TestCase):
    def setUp(self):
        self.replicas = [Replica(BIN, MODEL, "m", "-c", "4096") for _ in range(2)]
        self.router = None

    def tearDown(self):
        if self.router:
            self.router.stop()
        for r in self.replicas:
            r.stop()

    def test_sessions_complete_through_the_cache_aware_router(self):
        self.router = Router(ROUTER, self.replicas, "cache_aware")
        results = run_sessions(self.router.port, "m", n_sessions=4, turns=2, prefix_words=150, max_tokens=4, concurrency=2)
        self.assertEqual(len(results), 8)
        self.assertEqual([r["error"] for r in results if not r["ok"]], [])
        hits = sum(r.metrics()["vllm:prefix_cache_hits_total"] for r in self.replicas)
        self.assertGreater(hits, 0, "a session's second turn reuses its first turn's prefix")

    def test_a_replica_killed_mid_run_loses_no_request(self):
        self.router = Router(ROUTER, self.replicas, "round_robin")
        n = 6
        started = threading.Semaphore(0)
        results = [None] * n

        def stream(i):
            messages = [{"role": "user", "content": f"Tell story number {i}."}]
            results[i] = chat_stream(self.router.port, "m", messages, 200, timeout=120, on_first=started.release,
                                     ignore_eos=True)

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for _ in range(n):  # every stream is producing tokens
            self.assertTrue(started.acquire(timeout=120), "a stream did not start")
        t0 = time.time()
        self.replicas[0].kill()
        for t in threads:
            t.join(max(1.0, 150 - (time.time() - t0)))
        self.assertFalse(any(t.is_alive() for t in threads), "a stream hung after its replica died")
        ok = [r for r in results if r["ok"]]
        failed = [r for r in results if not r["ok"]]
        print(f"in flight at the kill: {len(ok)} completed, {len(failed)} failed: {[r['error'] for r in failed]}")
        self.assertGreaterEqual(len(failed), 1, "round robin put streams on the killed replica; they end in an error")
        self.assertGreaterEqual(len(ok), 1, "the survivor's streams finish")
        self.assertTrue(all(r["error"] for r in failed))

        before = self.replicas[1].metrics()["vllm:e2e_request_latency_seconds_count"]
        later = [chat_stream(self.router.port, "m", [{"role": "user", "content": f"Question {i}?"}], 4, timeout=60)
                 for i in range(6)]
        print("after the kill:", [r["ok"] or r["error"] for r in later])
        self.assertEqual([r["error"] for r in later if not r["ok"]], [], "new requests go to the survivor")
        self.assertEqual(self.replicas[1].metrics()["vllm:e2e_request_latency_seconds_count"] - before, 6)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
