#!/usr/bin/env python3
"""`tessera-bench serve` end to end on a tiny random model: levels 1 and 4, a few requests each,
then the prefix scenario. Checks the report's shape and sanity, not speed.

Usage: bench_serve_smoke.py TESSERA_BIN_DIR   (tessera, tessera-bench and make_tiny_model there)
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TESSERA_BIN", "build/bin")
TMP = tempfile.mkdtemp(prefix="tessera_bench_serve_")
MODEL = os.path.join(TMP, "tiny.gguf")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def bench(*args):
    cmd = [os.path.join(BIN, "tessera-bench"), "serve", "--model", MODEL, "--out", TMP, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    return p


subprocess.run([os.path.join(BIN, "make_tiny_model"), "--arch", "llama", "--dtype", "q8_0", "--out", MODEL],
               check=True, capture_output=True)

# Load levels.
p = bench("--concurrency", "1", "--concurrency", "4", "--requests", "6", "--prompt-len", "24", "--output-len", "12",
          "--seed", "7")
check(p.returncode == 0, f"load run exit status {p.returncode}")
report = json.load(open(os.path.join(TMP, "serve.json")))
check(report["schema_version"] == 1 and report["scenario"] == "load", "report header")
check([lv["concurrency"] for lv in report["levels"]] == [1, 4], "one level per --concurrency, in order")
for lv in report["levels"]:
    c = lv["concurrency"]
    check(lv["requests"] == 6 and lv["completed"] == 6 and lv["failed"] == 0, f"c={c}: every request completed")
    # ignore_eos: each request generates exactly its drawn length, 12 x [0.5, 1.5] -> [6, 18].
    check(6 * 6 <= lv["output_tokens"] <= 6 * 18, f"c={c}: output tokens {lv['output_tokens']} in [36, 108]")
    check(6 * 12 <= lv["input_tokens"] <= 6 * 36, f"c={c}: input tokens {lv['input_tokens']} in [72, 216]")
    for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        s = lv[k]
        check(0 < s["p50"] <= s["p99"] <= s["max"] + 1e-9, f"c={c}: {k} 0 < p50 <= p99 <= max ({s})")
    check(lv["ttft_ms"]["n"] == 6 and lv["e2e_ms"]["n"] == 6, f"c={c}: one TTFT and E2E per request")
    check(lv["itl_ms"]["n"] == lv["output_tokens"] - 6, f"c={c}: one ITL per token after each first")
    check(lv["e2e_ms"]["p50"] >= lv["ttft_ms"]["p50"], f"c={c}: E2E p50 >= TTFT p50")
    check(abs(lv["requests_per_s"] - 6 / lv["duration_s"]) < 1e-6 * lv["requests_per_s"] + 1e-9, f"c={c}: req/s")
    check(abs(lv["output_tokens_per_s"] * lv["duration_s"] - lv["output_tokens"]) < 1e-6 * lv["output_tokens"], f"c={c}: tok/s")
    check(0 <= lv["goodput_requests_per_s"] <= lv["requests_per_s"] + 1e-9, f"c={c}: goodput <= throughput")
rows = list(csv.DictReader(open(os.path.join(TMP, "serve.csv"))))
check(len(rows) == 2 and rows[1]["concurrency"] == "4" and rows[1]["completed"] == "6", "CSV: one row per level")
check("conc" in p.stdout and "goodput" in p.stdout, "the table is printed")

# The prefix scenario's machinery (the speed-up is a figure on SmolLM2, not asserted here).
p = bench("--scenario", "prefix", "--prefix-len", "160", "--suffix-len", "20", "--output-len", "8", "--rounds", "2")
check(p.returncode in (0, 3), f"prefix run exit status {p.returncode}")
r = json.load(open(os.path.join(TMP, "serve-prefix.json")))["result"]
check(r["outputs_identical"], "prefix: outputs with and without the cache are identical")
check(r["cached_tokens_min"] == 160, f"prefix: the 10 whole prefix blocks came from the cache ({r['cached_tokens_min']})")
check(r["computed_tokens_max"] == 20, f"prefix: only the suffix was computed ({r['computed_tokens_max']})")

# Bad arguments: a clear error, not a crash.
p = subprocess.run([os.path.join(BIN, "tessera-bench"), "serve", "--url", "http://127.0.0.1:1", "--model", MODEL],
                   capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "exactly one of --model or --url" in p.stderr, "both --model and --url are refused")

print("OK" if not failures else f"{len(failures)} check(s) failed")
sys.exit(1 if failures else 0)
