"""A loopback fleet: `tessera serve` replicas behind vllm-router, and a driver of multi-turn chat
sessions through it. Used by bench/scaleout/router_bench.py (figures) and
tests/server/test_router.py (a replica killed mid-run). Everything listens on 127.0.0.1 only;
every wait is bounded.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _get(port, path, timeout=10):
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


class Replica:
    """One `tessera serve` on a free loopback port (one CPU thread unless told otherwise)."""

    def __init__(self, bin_dir, model, name, *extra, threads=1):
        env = dict(os.environ, TESSERA_THREADS=str(threads))
        self.name = name
        self.proc = subprocess.Popen([os.path.join(bin_dir, "tessera"), "serve", "-m", model, "-d", "cpu", "--host", HOST,
                                      "--port", "0", "--model-name", name, *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on [0-9.]+:(\d+)", line)
        if not m:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"replica did not start: {line!r}")
        self.port = int(m.group(1))
        self.url = f"http://{HOST}:{self.port}"

    def metrics(self):
        """vLLM-named samples of /metrics: {name: value} (labels dropped)."""
        status, text = _get(self.port, "/metrics")
        assert status == 200, status
        out = {}
        for m in re.finditer(r"(?m)^(vllm:[a-z0-9_]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$", text):
            out.setdefault(m.group(1), float(m.group(2)))
        return out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


class Router:
    """vllm-router (the venv's, beside |python|) over |replicas| with |policy|, on loopback."""

    def __init__(self, router_bin, replicas, policy, *extra, timeout=60):
        self.port = free_port()
        self.log = open(os.devnull, "w")
        cmd = [router_bin, "--host", HOST, "--port", str(self.port), "--policy", policy,
               "--worker-urls", *[r.url for r in replicas],
               "--prometheus-host", HOST, "--prometheus-port", str(free_port()),
               "--worker-startup-check-interval", "1", "--worker-startup-timeout-secs", str(timeout),
               "--health-check-interval-secs", "1", "--health-failure-threshold", "1", "--log-level", "warning", *extra]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm-router exited with {self.proc.returncode}: {' '.join(cmd)}")
            try:
                if _get(self.port, "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("vllm-router did not become healthy")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def chat_stream(port, model, messages, max_tokens, timeout=120, on_first=None, **extra):
    """One streaming chat completion. Returns {ok, ttft, text, error, finish}: ok only with a
    final finish_reason and [DONE]; anything else (an HTTP error, a cut stream, a timeout) is an
    error with its reason. Never raises for a failed request."""
    t0 = time.time()
    out = {"ok": False, "ttft": None, "text": "", "error": None, "finish": None}
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions",
                     json.dumps(dict({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                                      "stream": True}, **extra)), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            out["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            return out
        done = False
        while time.time() - t0 < timeout:
            line = r.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out["error"] = f"error event: {chunk['error'].get('message')}"
                return out
            for c in chunk.get("choices", []):
                if out["ttft"] is None:
                    out["ttft"] = time.time() - t0
                    if on_first:
                        on_first()
                out["text"] += (c.get("delta") or {}).get("content") or ""
                out["finish"] = c.get("finish_reason") or out["finish"]
        if done and out["finish"]:
            out["ok"] = True
        else:
            out["error"] = "the stream ended without a finish_reason and [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return out


def session_prefix(i, words):
    """A long system prompt unique to session |i| (deterministic)."""
    vocab = ["river", "stone", "lantern", "harbor", "meadow", "copper", "violet", "signal", "orbit", "canyon", "ember",
             "quartz", "willow", "tundra", "falcon", "marble"]
    return f"Session {i}. Background notes: " + " ".join(vocab[(i * 7 + k * 3 + k // 5) % len(vocab)] for k in range(words))


def run_sessions(port, model, n_sessions, turns, prefix_words, max_tokens, concurrency, timeout=120):
    """|n_sessions| multi-turn chats, |concurrency| at a time, each turn resending the whole
    conversation (so every turn shares its session's long prefix). Returns one result per turn."""
    results = []
    lock = threading.Lock()
    todo = list(range(n_sessions))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            messages = [{"role": "system", "content": session_prefix(i, prefix_words)}]
            for t in range(turns):
                messages.append({"role": "user", "content": f"Turn {t}: summarise the notes in a few words."})
                r = chat_stream(port, model, messages, max_tokens, timeout)
                r.update(session=i, turn=t)
                with lock:
                    results.append(r)
                messages.append({"role": "assistant", "content": r["text"] or "ok"})

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for th in threads:
        th.start()
    deadline = time.time() + timeout * n_sessions * turns
    for th in threads:
        th.join(max(0.0, deadline - time.time()))
    return results


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(q / 100.0 * (len(v) - 1)))))
    return v[k]
