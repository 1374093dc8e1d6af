"""A `tessera serve` process on a free loopback port, for the server tests (127.0.0.1 only)."""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading

HOST = "127.0.0.1"
_TINY = {}
_TINY_LOCK = threading.Lock()


def tiny_model(bin_dir):
    """The tiny random llama model of make_tiny_model (a byte vocabulary, ChatML specials and
    template, a 256-token context), made once per process."""
    with _TINY_LOCK:
        if bin_dir not in _TINY:
            path = os.path.join(tempfile.mkdtemp(prefix="tessera_server_test_"), "tiny.gguf")
            subprocess.run([os.path.join(bin_dir, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--out", path],
                           check=True, capture_output=True)
            _TINY[bin_dir] = path
        return _TINY[bin_dir]


class Server:
    def __init__(self, bin_dir, *extra, port=0, model=None):
        """|model|: a GGUF path; default the tiny model."""
        self.proc = subprocess.Popen([os.path.join(bin_dir, "tessera"), "serve", "-m", model or tiny_model(bin_dir), "-d", "cpu",
                                      "--host", HOST, "--port", str(port), "--model-name", "tiny", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on [0-9.]+:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("the server did not start: " + line + self.proc.stderr.read())
        self.port = int(m.group(1))
        self.base_url = f"http://{HOST}:{self.port}/v1"

    def raw(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, obj, headers=None, timeout=60):
        status, h, body = self.raw("POST", path, json.dumps(obj), headers, timeout)
        try:
            return status, h, json.loads(body)
        except ValueError:
            return status, h, body

    def metrics(self):
        _, _, text = self.raw("GET", "/metrics")
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"(?m)^([a-z0-9_]+) ([0-9.eE+-]+)$", text)}

    def stop(self, want_rc=0, timeout=60):
        """SIGTERM; the exit status must be |want_rc| (a sanitizer build reports what it found at
        exit only through the status and stderr). Returns stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        if want_rc is not None and self.proc.returncode != want_rc:
            raise AssertionError(f"tessera serve exited with status {self.proc.returncode}:\n{err[-6000:]}")
        return err
