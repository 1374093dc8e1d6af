#!/usr/bin/env python3
"""tessera serve against the official openai client, on 127.0.0.1 with a tiny random model.

Usage: test_server.py TESSERA_BIN_DIR   (needs tessera with `serve` and make_tiny_model there)
Exits 77 (CTest: skipped) when the openai package is missing; under CI=true that is a failure (exit 1).
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

try:
    import openai
except ImportError:
    print("SKIP: the openai package is not installed (pip install openai)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TESSERA_BIN", "build/bin")
HOST = "127.0.0.1"
TMP = tempfile.mkdtemp(prefix="tessera_server_test_")
MODEL = os.path.join(TMP, "tiny.gguf")
# The same tiny model with room for 8192 tokens: the disconnect tests need choices that outlast the
# 100 ms between the server's checks of a silent connection (256 tokens of the tiny model decode in
# ~15 ms on a fast CPU, so most of 16 choices could finish before the disconnect is seen).
LONG_MODEL = os.path.join(TMP, "tiny_long.gguf")


class Server:
    """A `tessera serve` process on a free loopback port."""

    def __init__(self, *extra, model=MODEL):
        self.proc = subprocess.Popen([os.path.join(BIN, "tessera"), "serve", "-m", model, "-d", "cpu", "--host", HOST,
                                      "--port", "0", "--model-name", "tiny", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on [0-9.]+:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("the server did not start: " + line + self.proc.stderr.read())
        self.port = int(m.group(1))
        self.client = openai.OpenAI(base_url=f"http://{HOST}:{self.port}/v1", api_key="none", max_retries=0,
                                    timeout=120)

    def raw(self, method, path, body=None):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, dict(r.getheaders()), data

    def metric(self, name):
        _, _, text = self.raw("GET", "/metrics")
        m = re.search(r"^" + re.escape(name) + r" ([0-9.eE+-]+)$", text, re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        """SIGTERM, then the exit status must be 0: a sanitizer build reports what it found at exit
        (leaks, errors on the shutdown path) only through the status and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        if self.proc.returncode != 0:
            raise AssertionError(f"tessera serve exited with status {self.proc.returncode}:\n{err[-6000:]}")


def setUpModule():
    subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--out", MODEL],
                   check=True, capture_output=True)
    subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--ctx", "8192",
                    "--out", LONG_MODEL], check=True, capture_output=True)


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server("-c", "8192")
        cls.client = cls.server.client

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_health_and_models(self):
        status, _, body = self.server.raw("GET", "/health")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["status"], "ok")
        models = self.client.models.list().data
        self.assertEqual([m.id for m in models], ["tiny"])

    def test_chat(self):
        r = self.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                                max_tokens=7, temperature=0)
        self.assertEqual(len(r.choices), 1)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 5)
        self.assertLessEqual(r.usage.completion_tokens, 7)
        self.assertGreater(r.usage.completion_tokens, 0)
        # Greedy is deterministic; the second time the prompt's full blocks come from the cache.
        r2 = self.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}],
                                                 max_tokens=7, temperature=0)
        self.assertEqual(r2.choices[0].message.content, r.choices[0].message.content)

    def test_completions_with_logprobs_n_and_seed(self):
        r = self.client.completions.create(model="tiny", prompt="The capital of", max_tokens=6, temperature=1.0,
                                           seed=42, n=3, logprobs=2)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        for c in r.choices:
            self.assertEqual(c.finish_reason, "length")
            self.assertEqual(len(c.logprobs.tokens), 6)
            self.assertTrue(all(lp <= 0 for lp in c.logprobs.token_logprobs))
            # Keys are token texts: two byte tokens that are invalid UTF-8 alone both read as U+FFFD.
            self.assertTrue(all(1 <= len(t) <= 2 for t in c.logprobs.top_logprobs))
        self.assertEqual(r.usage.completion_tokens, 18)
        again = self.client.completions.create(model="tiny", prompt="The capital of", max_tokens=6, temperature=1.0,
                                               seed=42, n=3, logprobs=2)
        self.assertEqual([c.text for c in again.choices], [c.text for c in r.choices], "a seed reproduces")

    def test_stop_string(self):
        base = self.client.completions.create(model="tiny", prompt="abc", max_tokens=12, temperature=0)
        text = base.choices[0].text
        stop = text[3:5] if len(text) >= 5 else text[-1:]
        r = self.client.completions.create(model="tiny", prompt="abc", max_tokens=12, temperature=0, stop=[stop])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, text[:text.find(stop)])

    def test_streaming_chat(self):
        want = self.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "stream"}],
                                                   max_tokens=10, temperature=0)
        chunks = list(self.client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "stream"}],
                                                          max_tokens=10, temperature=0, stream=True,
                                                          stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, want.choices[0].message.content)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, [want.choices[0].finish_reason])
        self.assertEqual(chunks[-1].usage.completion_tokens, want.usage.completion_tokens)

    def test_streaming_completions(self):
        chunks = list(self.client.completions.create(model="tiny", prompt="once upon", max_tokens=8, temperature=0,
                                                     stream=True))
        want = self.client.completions.create(model="tiny", prompt="once upon", max_tokens=8, temperature=0)
        self.assertEqual("".join(c.choices[0].text for c in chunks), want.choices[0].text)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
        self.assertEqual(e.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="tiny", prompt="x", max_tokens="many")
        self.assertEqual(e.exception.body["param"], "max_tokens")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model="tiny", prompt="x " * 400)  # the tiny context is 256
        self.assertEqual(e.exception.body["code"], "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model="tiny", messages=[{"content": "no role"}])
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="tiny", prompt="x", temperature=5)
        status, _, body = self.server.raw("POST", "/v1/completions", "{not json")
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["type"], "invalid_request_error")
        status, _, body = self.server.raw("GET", "/v1/nothing")
        self.assertEqual(status, 404)
        self.assertIn("error", json.loads(body))

    def test_metrics(self):
        self.client.completions.create(model="tiny", prompt="metrics", max_tokens=3)
        _, headers, text = self.server.raw("GET", "/metrics")
        for name in ("tessera_kv_blocks_used", "tessera_requests_waiting", "tessera_prefix_cache_hit_rate",
                     "tessera_preemptions_total", "tessera_time_to_first_token_seconds_count"):
            self.assertRegex(text, r"(?m)^" + name + r" [0-9.eE+-]+$")
        self.assertGreaterEqual(self.server.metric("tessera_generation_tokens_total"), 3)
        # A request of 3 tokens decodes 2 steps of one shape: the second re-submits the
        # executable the first built (HAL v2's executable cache).
        built = self.server.metric("tessera_executables_built_total")
        reused = self.server.metric("tessera_executables_reused_total")
        self.assertGreaterEqual(built, 1)
        self.assertGreaterEqual(reused, 1)
        self.assertLessEqual(built + reused, self.server.metric("tessera_steps_total"))


class Load(unittest.TestCase):
    def test_200_requests_at_concurrency_32_all_complete(self):
        server = Server("-c", "16384", "--max-in-flight", "64")
        try:
            # A shared 45-byte prefix (two full 16-token blocks of the byte-level tiny vocabulary).
            report = load.run_load(f"http://{HOST}:{server.port}/v1", requests=200, concurrency=32, max_tokens=24,
                                   model="tiny", prefix="You are a helpful assistant. Answer briefly. ")
            print("\nload: " + json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in report.items()}),
                  flush=True)
            self.assertEqual(report["completed"], 200)
            self.assertGreater(report["output_tokens"], 200)
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0, "every block is free after the load")
            self.assertGreater(server.metric("tessera_prefix_cache_hit_rate"), 0, "the shared chat prefix hits")
        finally:
            server.stop()


KILLED_CLIENT = r"""
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1], api_key="none", max_retries=0)
# 16 choices of 240 tokens past any end-of-text token: long enough to be killed mid-stream.
for chunk in c.completions.create(model="tiny", prompt="a long story", max_tokens=240, stream=True, n=16,
                                  extra_body={"ignore_eos": True}):
    print("chunk", flush=True)
"""


class Lifecycle(unittest.TestCase):
    def test_a_client_killed_mid_stream_frees_its_blocks(self):
        server = Server("-c", "4096", model=LONG_MODEL)
        try:
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0)
            client = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, f"http://{HOST}:{server.port}/v1"],
                                      stdout=subprocess.PIPE, text=True)
            for _ in range(3):
                self.assertEqual(client.stdout.readline().strip(), "chunk")
            # /metrics is a snapshot taken after each engine step, and the chunks above stream out
            # during the first one: on a loaded machine (a sanitizer build) the gauge can lag.
            deadline = time.time() + 20
            while time.time() < deadline and not server.metric("tessera_kv_blocks_used"):
                time.sleep(0.01)
            self.assertGreater(server.metric("tessera_kv_blocks_used"), 0, "the request holds blocks mid-stream")
            client.kill()
            client.wait()
            client.stdout.close()
            deadline = time.time() + 20
            while time.time() < deadline and server.metric("tessera_kv_blocks_used") != 0:
                time.sleep(0.05)
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0, "the gauge returns to its baseline")
            _, _, text = server.raw("GET", "/metrics")
            # A quiet machine may finish a choice or two before the disconnect is seen; every
            # choice must be accounted for and the rest cancelled, none left running.
            finished = {m.group(1): int(m.group(2)) for m in
                        re.finditer(r'tessera_request_finished_total\{reason="(\w+)"\} (\d+)', text)}
            self.assertEqual(sum(finished.values()), 16, text)
            self.assertGreaterEqual(finished.get("cancelled", 0), 12, text)
        finally:
            server.stop()

    def test_a_non_streaming_client_that_disconnects_cancels_and_frees_its_blocks(self):
        # One sequence per step, so 16 choices x 4000 tokens take seconds: still running when the
        # client goes away.
        server = Server("-c", "8192", "--max-seqs", "1", model=LONG_MODEL)
        try:
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0)
            body = json.dumps({"model": "tiny", "prompt": "a long story", "max_tokens": 4000, "n": 16,
                               "ignore_eos": True}).encode()
            sock = socket.create_connection((HOST, server.port))
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            deadline = time.time() + 20
            while time.time() < deadline and not server.metric("tessera_kv_blocks_used"):
                time.sleep(0.01)
            self.assertGreater(server.metric("tessera_kv_blocks_used"), 0, "the request holds blocks")
            sock.close()
            deadline = time.time() + 20
            while time.time() < deadline and server.metric("tessera_kv_blocks_used") != 0:
                time.sleep(0.05)
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0, "the gauge returns to its baseline")
            _, _, text = server.raw("GET", "/metrics")
            # A quiet machine may finish a choice or two before the disconnect is seen; every
            # choice must be accounted for and the rest cancelled, none left running.
            finished = {m.group(1): int(m.group(2)) for m in
                        re.finditer(r'tessera_request_finished_total\{reason="(\w+)"\} (\d+)', text)}
            self.assertEqual(sum(finished.values()), 16, text)
            self.assertGreaterEqual(finished.get("cancelled", 0), 12, text)
            self.assertEqual(server.metric("tessera_http_requests_in_flight"), 0)
        finally:
            server.stop()

    def test_swap_preemption_with_a_too_small_pool_gives_every_request_its_solo_output(self):
        # 192 KV slots (12 blocks) for 8 concurrent requests of 108 tokens (7 blocks) each: sequences
        # must be preempted, and each still fits the pool alone.
        prompts = [f"request number {i} asks for a story about the sea" for i in range(8)]
        kwargs = dict(model="tiny", max_tokens=60, temperature=0, extra_body={"ignore_eos": True})
        solo_server = Server("-c", "4096")
        try:
            want = [solo_server.client.completions.create(prompt=p, **kwargs).choices[0].text for p in prompts]
        finally:
            solo_server.stop()
        server = Server("-c", "192", "--preemption", "swap", "--swap-space", "1024")
        try:
            got = [None] * len(prompts)

            def run(i):
                got[i] = server.client.completions.create(prompt=prompts[i], **kwargs).choices[0].text

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertEqual(got, want)
            self.assertGreater(server.metric("tessera_swap_out_total"), 0, "some sequences were swapped")
            self.assertEqual(server.metric("tessera_swap_in_total"), server.metric("tessera_swap_out_total"))
            self.assertEqual(server.metric("tessera_kv_blocks_used"), 0)
        finally:
            server.stop()

    def test_a_full_queue_answers_429_with_retry_after(self):
        server = Server("-c", "4096", "--max-in-flight", "2")
        try:
            results = []

            def post():
                body = json.dumps({"model": "tiny", "prompt": "busy", "max_tokens": 200})
                results.append(server.raw("POST", "/v1/completions", body))

            threads = [threading.Thread(target=post) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            statuses = sorted(r[0] for r in results)
            self.assertIn(200, statuses)
            self.assertIn(429, statuses)
            rejected = [r for r in results if r[0] == 429][0]
            self.assertEqual(rejected[1].get("Retry-After"), "1")
            self.assertEqual(json.loads(rejected[2])["error"]["type"], "rate_limit_error")
        finally:
            server.stop()

    def test_sigterm_finishes_requests_in_flight_then_exits_cleanly(self):
        server = Server("-c", "4096")
        kwargs = dict(model="tiny", prompt="finish me", max_tokens=200, temperature=0, extra_body={"ignore_eos": True})
        want = server.client.completions.create(**kwargs)
        result = {}

        def run():
            result["r"] = server.client.completions.create(**kwargs)

        t = threading.Thread(target=run)
        t.start()
        deadline = time.time() + 20
        while time.time() < deadline and server.metric("tessera_kv_blocks_used") == 0:
            time.sleep(0.01)
        server.proc.send_signal(signal.SIGTERM)
        t.join(60)
        self.assertEqual(server.proc.wait(60), 0)
        self.assertIn("r", result, "the request in flight completed")
        self.assertEqual(result["r"].choices[0].text, want.choices[0].text, "and was not cut short")
        self.assertEqual(result["r"].usage.completion_tokens, want.usage.completion_tokens)
        server.stop()



class Speculative(unittest.TestCase):
    def test_ngram_greedy_equals_off_and_spec_k_is_checked(self):
        server = Server("-c", "4096", "--spec", "ngram", "--spec-no-cost-gate")
        try:
            prompt = "a b c d a b c d a b c d"
            def run(spec_k):
                return server.client.completions.create(model="tiny", prompt=prompt, max_tokens=48, temperature=0,
                                                        extra_body={"ignore_eos": True, "spec_k": spec_k})
            off = run(0)
            self.assertEqual(server.metric("tessera_spec_draft_tokens_total"), 0)
            on = run(4)
            self.assertEqual(on.choices[0].text, off.choices[0].text)
            self.assertEqual(on.usage.completion_tokens, 48)
            self.assertGreater(server.metric("tessera_spec_draft_tokens_total"), 0)
            self.assertIn("vllm:spec_decode_num_accepted_tokens_total", server.raw("GET", "/metrics")[2])
            with self.assertRaises(openai.BadRequestError) as e:
                run(99)
            self.assertEqual(e.exception.body["param"], "spec_k")
        finally:
            server.stop()

    def test_draft_model_greedy_equals_off_and_sampling_is_seeded(self):
        # The draft is the f32 copy of the served q8_0 tiny model: close to it, not equal.
        draft = os.path.join(TMP, "tiny_f32_draft.gguf")
        subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "f32", "--out", draft],
                       check=True, capture_output=True)
        server = Server("-c", "4096", "--spec", "draft", "--draft-model", draft, "--spec-no-cost-gate")
        try:
            prompt = "a b c d a b c d a b c d"
            def run(spec_k, **kw):
                return server.client.completions.create(model="tiny", prompt=prompt, max_tokens=48,
                                                        extra_body={"ignore_eos": True, "spec_k": spec_k}, **kw)
            off = run(0, temperature=0)
            self.assertEqual(server.metric("tessera_spec_draft_tokens_total"), 0)
            on = run(4, temperature=0)
            self.assertEqual(on.choices[0].text, off.choices[0].text)
            self.assertGreater(server.metric("tessera_spec_accepted_tokens_total"), 0)
            # The draft model's own counters: its forwards and the context it caught up on.
            self.assertGreater(server.metric("tessera_spec_draft_model_forwards_total"), 0)
            self.assertGreaterEqual(server.metric("tessera_spec_draft_model_catch_up_tokens_total"), 12)
            self.assertEqual(server.metric("tessera_spec_draft_model_failures_total"), 0)
            self.assertGreater(server.metric("tessera_spec_propose_seconds_total"), 0)
            # Sampled drafts (dense q): a fixed seed gives the same text twice.
            a = run(4, temperature=0.8, seed=7)
            b = run(4, temperature=0.8, seed=7)
            self.assertEqual(a.usage.completion_tokens, 48)
            self.assertEqual(a.choices[0].text, b.choices[0].text)
        finally:
            server.stop()

    def test_draft_model_with_another_vocabulary_is_refused_at_start(self):
        wide = os.path.join(TMP, "tiny_wide_vocab.gguf")
        subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--vocab", "300",
                        "--out", wide], check=True, capture_output=True)
        # The server binds (and says so) before it loads; the draft's check then ends it with status 2.
        r = subprocess.run([os.path.join(BIN, "tessera"), "serve", "-m", MODEL, "-d", "cpu", "--host", HOST, "--port", "0",
                            "-c", "4096", "--spec", "draft", "--draft-model", wide],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("vocabulary of 300 tokens, but the target's has 260", r.stderr)

if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
