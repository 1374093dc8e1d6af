#!/usr/bin/env python3
"""Tessera against llama.cpp on this machine: the table of issue #15, in one run.

Both engines read the same GGUF files: a 1B-shaped Llama made by Tessera's make_tiny_model (F16,
random weights) and quantised by the peer's llama-quantize into Q4_0, Q8_0 and Q4_K_M, plus
SmolLM2-135M-Instruct Q4_1. For each model and round it runs `tessera-bench model` and
`llama-bench`, alternating which engine goes first from round to round (so a slow spell of the
shared machine falls on both), and prints the medians over rounds of pp128, pp512 and tg64 in
tokens/s with the ratios Tessera / llama.cpp (> 1: Tessera is faster). See docs/bench.md.

Only the standard library is used. compare.sh beside this file is the entry point.
"""
import argparse
import csv
import datetime
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOLLM_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The 1B shape of the issue (Llama 3.2 1B's layout, a 32000-token vocabulary): ~1.1 G parameters.
SHAPE_1B = {"--layers": 16, "--dim": 2048, "--heads": 32, "--kv-heads": 8, "--ff": 8192, "--vocab": 32000,
            "--ctx": 4096}
# (row label, file name, llama-quantize type); llama-quantize needs lower-case output names.
QUANTS_1B = [("1B-shaped Llama Q4_0", "1b-q4_0.gguf", "Q4_0"),
             ("1B-shaped Llama Q8_0", "1b-q8_0.gguf", "Q8_0"),
             ("1B-shaped Llama Q4_K_M", "1b-q4_k_m.gguf", "Q4_K_M")]
TESTS = ("pp128", "pp512", "tg64")
THREADS = 2


class CompareError(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, what, env=None):
    """Runs |cmd|, returns its stdout; a failure raises with the command and its output's tail."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
        raise CompareError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    return p.stdout


def find_tool(dirs, name, hint):
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise CompareError(f"{name} not found in {', '.join(dirs)} ({hint})")


def peer_tools(peer, quick):
    """llama-bench and llama-quantize (None with --quick, which makes no models)."""
    if not os.path.isdir(peer):
        raise CompareError(f"peer folder {peer} does not exist (build it: bash /work/shared/peer/llama-cpp.sh; "
                           "it prints the folder to pass)")
    # The folder llama-cpp.sh prints holds build/bin; its bin folder itself is accepted too.
    dirs = [os.path.join(peer, "build", "bin"), os.path.join(peer, "bin"), peer]
    hint = "is the peer build finished? bash /work/shared/peer/llama-cpp.sh"
    return find_tool(dirs, "llama-bench", hint), None if quick else find_tool(dirs, "llama-quantize", hint)


def tessera_tools(build):
    if not os.path.isdir(build):
        raise CompareError(f"Tessera build folder {build} does not exist")
    dirs = [os.path.join(build, "bin")]
    hint = f"ninja -C {build} tessera tessera-bench make_tiny_model"
    return (find_tool(dirs, "tessera-bench", hint), find_tool(dirs, "make_tiny_model", hint),
            find_tool(dirs, "tessera", hint))


def parse_variants(specs, reserved):
    """[(name, environment)] from --variant NAME:VAR=VALUE specs; |reserved| are the engines' own names."""
    variants = []
    for v in specs:
        name, _, assign = v.partition(":")
        var, eq, val = assign.partition("=")
        if not name or not var or not eq or name in reserved:
            raise CompareError(f"--variant {v!r}: expected NAME:VAR=VALUE")
        variants.append((name, dict(os.environ, **{var: val})))
    return variants


def cpu_isa(tessera):
    """The CPU line of `tessera info` (what Tessera's dispatch sees), else /proc/cpuinfo's flags."""
    try:
        out = run([tessera, "info"], "tessera info").splitlines()
        for i, line in enumerate(out):
            if line.strip().startswith("cpu ") and i + 1 < len(out) and "features:" in out[i + 1]:
                return out[i + 1].split("features:", 1)[1].strip()
    except CompareError:
        pass
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    return " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni") if f in flags)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def make_models(cache, make_tiny_model, quantize, smollm, quick, only=()):
    """Returns [(label, path)] (those whose label contains a text of |only|, when given); files
    already in |cache| are reused (delete them to remake)."""
    def wanted(label):
        return not only or any(t in label for t in only)

    models = []
    if not quick and any(wanted(label) for label, _, _ in QUANTS_1B):
        f16 = os.path.join(cache, "1b-f16.gguf")
        if not os.path.isfile(f16):
            log(f"making {f16} (make_tiny_model, 1B shape, F16: ~2.2 GB)")
            part = os.path.join(cache, "1b-f16.part.gguf")
            args = [make_tiny_model, "--arch", "llama", "--dtype", "f16", "--seed", "1", "--out", part]
            for k, v in SHAPE_1B.items():
                args += [k, str(v)]
            run(args, "make_tiny_model")
            os.replace(part, f16)
        for label, name, qtype in QUANTS_1B:
            if not wanted(label):
                continue
            out = os.path.join(cache, name)
            if not os.path.isfile(out):
                log(f"quantising {out} (llama-quantize {qtype})")
                part = os.path.join(cache, name.replace(".gguf", ".part.gguf"))
                run([quantize, f16, part, qtype, str(THREADS)], "llama-quantize")
                os.replace(part, out)
            models.append((label, out))
    if wanted("SmolLM2-135M Q4_1"):
        models.append(("SmolLM2-135M Q4_1", smollm))
    return models


def tessera_once(bench, model, prompt, decode, reps, env=None, isa=""):
    """(prefill t/s, decode t/s) of one request (2 threads, concurrency 1), tessera-bench's median
    of |reps| runs; |isa| pins the CPU kernels' SIMD target (tessera-bench model --isa)."""
    out = run([bench, "model", model, "--threads", str(THREADS), "--concurrency", "1", "--prompt", str(prompt),
               "--decode", str(decode), "--repeats", str(reps)] + (["--isa", isa] if isa else []),
              "tessera-bench model", env)
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if "prefill t/s" in line and i + 1 < len(lines):
            f = lines[i + 1].split()
            if len(f) >= 4 and f[0] == str(THREADS) and f[1] == "1":
                return float(f[2]), float(f[3])
    raise CompareError(f"tessera-bench model printed no row for {THREADS} threads:\n{out}")


def tessera_round(bench, model, reps, env=None, isa=""):
    pp128, tg64 = tessera_once(bench, model, 128, 64, reps, env, isa)
    pp512, _ = tessera_once(bench, model, 512, 1, reps, env, isa)  # one token: prefill only
    return {"pp128": pp128, "pp512": pp512, "tg64": tg64}


def llama_round(llama_bench, model, reps):
    out = run([llama_bench, "-m", model, "-t", str(THREADS), "-p", "128,512", "-n", "64", "-r", str(reps),
               "-o", "csv"], "llama-bench")
    rows = list(csv.reader(io.StringIO(out)))
    rows = [r for r in rows if r]
    if len(rows) < 2:
        raise CompareError(f"llama-bench printed no CSV rows:\n{out}")
    head = rows[0]
    # avg_ts by name; else the second-to-last column, which is avg t/s in the CSV of this era.
    i_ts = head.index("avg_ts") if "avg_ts" in head else len(head) - 2
    i_p, i_n = head.index("n_prompt"), head.index("n_gen")
    res = {}
    for r in rows[1:]:
        n_p, n_g = int(r[i_p]), int(r[i_n])
        key = f"pp{n_p}" if n_g == 0 else f"tg{n_g}"
        res[key] = float(r[i_ts])
    missing = [t for t in TESTS if t not in res]
    if missing:
        raise CompareError(f"llama-bench gave no {', '.join(missing)}:\n{out}")
    return res


def fmt(x):
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def main():
    ap = argparse.ArgumentParser(prog="compare.sh", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peer", help="the folder bash /work/shared/peer/llama-cpp.sh prints (holds build/bin)")
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"),
                    help="Tessera's build folder (default: build/ of this checkout)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 1 round, the SmolLM2 row only")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; the table shows medians (default 3)")
    ap.add_argument("--reps", type=int, default=2,
                    help="runs inside each engine's call per round: tessera-bench --repeats, llama-bench -r "
                         "(default 2)")
    ap.add_argument("--cache", default=os.environ.get("TESSERA_COMPARE_CACHE",
                                                      os.path.expanduser("~/.cache/tessera-compare")),
                    help="folder for the generated models and raw results (default ~/.cache/tessera-compare)")
    ap.add_argument("--smollm", default=os.path.join(ROOT, "models-cache", SMOLLM_NAME),
                    help="SmolLM2-135M-Instruct Q4_1 GGUF (default: models-cache/, fetched by .ci/fetch-model)")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="run only the models whose row label contains TEXT (repeatable; e.g. --only Q4_K_M)")
    ap.add_argument("--rows", action="store_true",
                    help="also run Tessera with TESSERA_CPU_REPACK=0 (weights in the file's rows) as a third "
                         "engine in every round, with its ratios to llama.cpp (= --variant rows:TESSERA_CPU_REPACK=0)")
    ap.add_argument("--isa", default="", choices=["", "avx2", "avx3", "avx3_dl", "scalar"],
                    help="pin Tessera's CPU kernels to this SIMD target, to measure another machine's path; "
                         "pair it with a peer built for the same ISA (e.g. GGML_NATIVE=OFF GGML_AVX2=ON "
                         "GGML_AVX512=OFF), docs/bench.md")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE",
                    help="also run Tessera with this environment variable set, as one more engine in every "
                         "round (repeatable; e.g. --variant no-amx:TESSERA_CPU_AMX=0 for the AVX-512 kernels "
                         "on an AMX machine)")
    a = ap.parse_args()
    variants = parse_variants((["rows:TESSERA_CPU_REPACK=0"] if a.rows else []) + a.variant, ("tessera", "llama.cpp"))
    rounds = 1 if a.quick else a.rounds
    if rounds < 1 or a.reps < 1:
        raise CompareError("--rounds and --reps must be at least 1")

    llama_bench, quantize = peer_tools(os.path.abspath(a.peer), a.quick)
    bench, make_tiny_model, tessera = tessera_tools(os.path.abspath(a.build))
    if not os.path.isfile(a.smollm):
        if a.smollm != os.path.join(ROOT, "models-cache", SMOLLM_NAME):
            raise CompareError(f"{a.smollm} does not exist")
        log("fetching SmolLM2 with .ci/fetch-model")
        run(["bash", os.path.join(ROOT, ".ci", "fetch-model")], ".ci/fetch-model")
    os.makedirs(a.cache, exist_ok=True)
    models = make_models(a.cache, make_tiny_model, quantize, a.smollm, a.quick, a.only)
    if a.only:
        if not models:
            raise CompareError(f"--only {a.only} matches no model")

    isa = cpu_isa(tessera)
    start = datetime.datetime.now(datetime.timezone.utc)
    load_start = loadavg()
    raw_path = os.path.join(a.cache, "compare-" + start.strftime("%Y%m%dT%H%M%SZ") + ".csv")
    raw = []  # (round, model, engine, test, t/s)
    t0 = time.time()
    for rnd in range(rounds):
        # Round 0: Tessera first; round 1: llama.cpp first; ...
        engines = ["tessera", "llama.cpp"] if rnd % 2 == 0 else ["llama.cpp", "tessera"]
        engines[1:1] = [name for name, _ in variants]
        for label, path in models:
            for eng in engines:
                if eng == "llama.cpp":
                    r = llama_round(llama_bench, path, a.reps)
                else:
                    r = tessera_round(bench, path, a.reps, dict(variants).get(eng), a.isa)
                log(f"round {rnd + 1}/{rounds} {label:24s} {eng:9s} " +
                    "  ".join(f"{t} {r[t]:7.1f}" for t in TESTS) + f"   (load {loadavg()})")
                raw += [(rnd + 1, label, eng, t, r[t]) for t in TESTS]
    minutes = (time.time() - t0) / 60
    with open(raw_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "model", "engine", "test", "tokens_per_s"])
        w.writerows(raw)

    def med(label, eng, t):
        return statistics.median(v for (_, m, e, tt, v) in raw if m == label and e == eng and tt == t)

    print(f"Tessera vs llama.cpp, {THREADS} threads, median of {rounds} alternating round(s) "
          f"({a.reps} run(s) per call), tokens/s")
    print(f"date {start.strftime('%Y-%m-%d %H:%M UTC')}; {cpu_name()}, {os.cpu_count()} CPUs; ISA: {isa}")
    print(f"load average (1/5/15 min) at start {load_start}, at end {loadavg()}; {minutes:.1f} min")
    if a.isa:
        print(f"Tessera's CPU kernels forced to {a.isa} (tessera-bench model --isa {a.isa}); "
              f"llama.cpp as built in {os.path.abspath(a.peer)}")
    print()
    print("| model | Tessera pp128 / pp512 / tg64 | llama.cpp pp128 / pp512 / tg64 | pp128 ratio | pp512 ratio "
          "| tg64 ratio |")
    print("|---|---|---|---|---|---|")
    for label, _ in models:
        ts = [med(label, "tessera", t) for t in TESTS]
        ls = [med(label, "llama.cpp", t) for t in TESTS]
        ratios = [f"{x / y:.2f}" if y > 0 else "-" for x, y in zip(ts, ls)]
        print(f"| {label} | {' / '.join(fmt(x) for x in ts)} | {' / '.join(fmt(x) for x in ls)} | "
              + " | ".join(ratios) + " |")
    for name, env in variants:
        setting = next(f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v)
        print()
        print(f"Tessera with {setting} ({name}), the same rounds:")
        print()
        print(f"| model | {name} pp128 / pp512 / tg64 | {name} / llama.cpp pp128 / pp512 / tg64 | Tessera / {name} |")
        print("|---|---|---|---|")
        for label, _ in models:
            rs = [med(label, name, t) for t in TESTS]
            ts = [med(label, "tessera", t) for t in TESTS]
            ls = [med(label, "llama.cpp", t) for t in TESTS]
            print(f"| {label} | {' / '.join(fmt(x) for x in rs)} | "
                  + " / ".join(f"{x / y:.2f}" for x, y in zip(rs, ls)) + " | "
                  + " / ".join(f"{x / y:.2f}" for x, y in zip(ts, rs)) + " |")
    print()
    print(f"ratio = Tessera / llama.cpp (> 1: Tessera faster). Every round's figures: {raw_path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CompareError as e:
        print(f"compare.sh: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
