#!/usr/bin/env python3
"""tessera serve against llama-server on this machine (issue #15's serving item), in one script.

Both servers load the same GGUF (default: compare.py's 1B-shaped Q4_0) with the same KV capacity
(--ctx tokens; llama-server gets -np equal to the highest concurrency, so each slot holds
ctx / np tokens) and the same thread count; `tessera-bench serve` drives each with the same
requests (fixed prompt and output lengths, ignore_eos) at every concurrency level: `--url` for
llama-server, `--model` for Tessera. Rounds alternate which server goes first; the tables show
medians over the rounds of output tokens/s and TTFT p99 per level, and their ratios. --busy N runs
the whole comparison beside N processes that spin on a core each (issue 44: serving on a shared
machine), started before the first round and killed after the last.

--loras N serves N random LoRA adapters of rank --lora-rank (make_bench_loras.py: PEFT folders for
Tessera, GGUF files for llama-server, the same values) and spreads the requests over them in
llama.cpp's "lora" dialect, which both servers take; a tessera-base run serves the base model alone
for the adapters' cost (issue 41).

Usage: bench/peer/serve_compare.sh [--rounds N] [--concurrency C ...] [--model F] [--ctx N]
                                   [--prompt N] [--output N] [--requests N] [--variant NAME:VAR=VALUE]
                                   [--busy N] [--peer-threads N] [--loras N [--lora-rank R]]
                                   PEER_DIR [BUILD_DIR]
The work of finding tools and reading the machine is compare.py's (imported from beside this file).
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (this folder's llama-bench comparison: tool lookup, machine info)

ROOT = compare.ROOT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc, timeout_s=600):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise compare.CompareError(f"llama-server exited with {proc.returncode} while loading")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise compare.CompareError(f"llama-server did not become healthy within {timeout_s} s")


def bench_args(a, loras=0):
    args = ["--request-loras", str(loras)] if loras else []
    for c in a.concurrency:
        args += ["--concurrency", str(c)]
    return args + ["--prompt-len", str(a.prompt), "--prompt-spread", "0", "--output-len", str(a.output),
                   "--output-spread", "0", "--requests", str(a.requests), "--slo-ttft-ms", "1e9",
                   "--slo-tpot-ms", "1e9"]


def read_levels(out_dir):
    with open(os.path.join(out_dir, "serve.json")) as f:
        report = json.load(f)
    levels = {}
    for lv in report["levels"]:
        if lv["failed"]:
            raise compare.CompareError(f"{lv['failed']} requests failed at concurrency {lv['concurrency']}: "
                                       f"{lv['errors'][:2]}")
        levels[lv["concurrency"]] = (lv["output_tokens_per_s"], lv["ttft_ms"]["p99"], lv["tpot_ms"]["p50"])
    return levels


def llama_round(server, bench, a, tmp):
    port = free_port()
    np_ = max(a.concurrency)
    log_path = os.path.join(tmp, "llama-server.log")
    with open(log_path, "w") as log:
        # LoRA: the same adapters as GGUF files, off unless a request names one (as Tessera serves them).
        loras = [x for i in range(a.loras) for x in ("--lora", os.path.join(tmp, "loras", f"lora-{i}.gguf"))]
        if loras:
            loras.append("--lora-init-without-apply")
        proc = subprocess.Popen([server, "-m", a.model, "-t", str(a.peer_threads or compare.THREADS), "-c", str(a.ctx), "-np", str(np_),
                                 "--host", "127.0.0.1", "--port", str(port)] + loras, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        out = os.path.join(tmp, "llama")
        compare.run([bench, "serve", "--url", f"http://127.0.0.1:{port}", "--out", out] + bench_args(a, a.loras),
                    "tessera-bench serve --url (llama-server)")
        return read_levels(out)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def tessera_round(bench, a, tmp, name, env):
    out = os.path.join(tmp, name)
    # A variant's SERVER_ARGS are flags of `tessera serve` (--variant NAME:SERVER_ARGS="--itl-factor=0 ...").
    extra = [f"--server-arg={x}" for x in (env or {}).get("SERVER_ARGS", "").split()]
    loras = 0 if name == "tessera-base" else a.loras  # tessera-base: the same server without adapters
    extra += [f"--server-arg=--lora=lora-{i}={os.path.join(tmp, 'loras', f'lora-{i}')}" for i in range(loras)]
    compare.run([bench, "serve", "--model", a.model, f"--server-arg=--ctx={a.ctx}", "--out", out] + extra + bench_args(a, loras),
                f"tessera-bench serve --model ({name})", env)
    return read_levels(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peer", help="the folder bash /work/shared/peer/llama-cpp.sh prints (holds build/bin)")
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"), help="Tessera's build folder")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; medians (default 2)")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--model", default=os.path.join(os.path.expanduser("~/.cache/tessera-compare"), "1b-q4_0.gguf"),
                    help="GGUF both servers load (default: compare.sh's 1B-shaped Q4_0; run compare.sh once to make it)")
    ap.add_argument("--ctx", type=int, default=16384, help="KV capacity in tokens, the same for both (default 16384)")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens per request (default 64)")
    ap.add_argument("--output", type=int, default=64, help="output tokens per request (default 64)")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (0: tessera-bench's max(8, 4 x C))")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE",
                    help="also run tessera serve with this environment setting (repeatable); the variable "
                         "SERVER_ARGS holds flags of tessera serve instead")
    ap.add_argument("--loras", type=int, default=0,
                    help="serve this many random LoRA adapters (make_bench_loras.py: PEFT for Tessera, GGUF for "
                         "llama-server, the same values) and spread the requests over them; adds a tessera-base "
                         "run of the base model alone (default 0: no adapters)")
    ap.add_argument("--lora-rank", type=int, default=16, help="the adapters' rank (default 16)")
    ap.add_argument("--busy", type=int, default=0,
                    help="spinning processes beside both servers for the whole run (default 0)")
    ap.add_argument("--peer-threads", type=int, default=0,
                    help="llama-server's -t (default: compare.py's thread count, as Tessera's default)")
    a = ap.parse_args()
    if a.busy < 0 or a.peer_threads < 0:
        raise compare.CompareError("--busy and --peer-threads must not be negative")
    if a.rounds < 1:
        raise compare.CompareError("--rounds must be at least 1")
    if not os.path.isfile(a.model):
        raise compare.CompareError(f"{a.model} does not exist (bench/peer/compare.sh --only Q4_0 makes it)")
    variants = compare.parse_variants(a.variant, ("tessera", "llama-server"))
    peer_bin = [os.path.join(a.peer, "build", "bin"), os.path.join(a.peer, "bin"), a.peer]
    server = compare.find_tool(peer_bin, "llama-server", "bash /work/shared/peer/llama-cpp.sh builds it")
    bench, _, tessera = compare.tessera_tools(os.path.abspath(a.build))

    isa = compare.cpu_isa(tessera)
    start = datetime.datetime.now(datetime.timezone.utc)
    load_start = compare.loadavg()
    results = {}  # engine -> [levels per round]
    t0 = time.time()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        run_rounds(a, variants, server, bench, results)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print_tables(a, variants, results, isa, start, load_start, t0)
    return 0


def run_rounds(a, variants, server, bench, results):
    with tempfile.TemporaryDirectory(prefix="tessera-serve-compare-") as tmp:
        if a.loras:
            compare.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_bench_loras.py"), a.model,
                         os.path.join(tmp, "loras"), "--count", str(a.loras), "--rank", str(a.lora_rank)], "make_bench_loras.py")
        for rnd in range(a.rounds):
            engines = ["tessera", "llama-server"] if rnd % 2 == 0 else ["llama-server", "tessera"]
            engines[1:1] = [name for name, _ in variants] + (["tessera-base"] if a.loras else [])
            for eng in engines:
                if eng == "llama-server":
                    lv = llama_round(server, bench, a, tmp)
                else:
                    lv = tessera_round(bench, a, tmp, eng, dict(variants).get(eng))
                results.setdefault(eng, []).append(lv)
                compare.log(f"round {rnd + 1}/{a.rounds} {eng:13s} " +
                            "  ".join(f"c{c} {lv[c][0]:6.1f} tok/s p99 TTFT {lv[c][1] / 1000:6.2f} s"
                                      for c in a.concurrency) + f"   (load {compare.loadavg()})")


def print_tables(a, variants, results, isa, start, load_start, t0):
    def med(eng, c, i):
        return statistics.median(r[c][i] for r in results[eng])

    print(f"tessera serve vs llama-server (-t {a.peer_threads or compare.THREADS}), {os.path.basename(a.model)}, "
          f"{a.prompt} in / {a.output} out, {a.ctx} KV tokens each; median of {a.rounds} alternating round(s); "
          f"{a.busy} busy process(es) beside them")
    if a.loras:
        print(f"LoRA: {a.loras} random adapters of rank {a.lora_rank} over every projection, request i under adapter "
              f"i % {a.loras} for tessera and llama-server; tessera-base serves the base model alone")
    print(f"date {start.strftime('%Y-%m-%d %H:%M UTC')}; {compare.cpu_name()}, {os.cpu_count()} CPUs; ISA: {isa}")
    print(f"load average (1/5/15 min) at start {load_start}, at end {compare.loadavg()}; "
          f"{(time.time() - t0) / 60:.1f} min")
    for eng in ["tessera"] + [name for name, _ in variants] + (["tessera-base"] if a.loras else []):
        print()
        print(f"| concurrency | {eng} out tok/s | llama-server out tok/s | ratio | {eng} TTFT p99 s | "
              "llama-server TTFT p99 s | ratio | TPOT p50 ms (both) |")
        print("|---|---|---|---|---|---|---|---|")
        for c in a.concurrency:
            t, l = med(eng, c, 0), med("llama-server", c, 0)
            tt, lt = med(eng, c, 1), med("llama-server", c, 1)
            print(f"| {c} | {t:.1f} | {l:.1f} | {t / l:.2f} | {tt / 1000:.2f} | {lt / 1000:.2f} | {tt / lt:.2f} | "
                  f"{med(eng, c, 2):.0f} / {med('llama-server', c, 2):.0f} |")
    if a.loras:
        print()
        print("| concurrency | tessera with adapters out tok/s | tessera-base out tok/s | ratio |")
        print("|---|---|---|---|")
        for c in a.concurrency:
            t, b = med("tessera", c, 0), med("tessera-base", c, 0)
            print(f"| {c} | {t:.1f} | {b:.1f} | {t / b:.2f} |")
    print()
    print("out tok/s ratio > 1 and TTFT ratio < 1: Tessera better")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except compare.CompareError as e:
        print(f"serve_compare.sh: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
