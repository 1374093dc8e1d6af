#!/usr/bin/env python3
"""Speculative decoding figures (docs/speculative.md): tokens per second of `tessera serve` with
and without speculation (--spec ngram, or --spec draft with --draft-model) on an input-grounded
task (rewrite a given piece of code), at concurrency 1 and 16. Each configuration runs in a fresh server; each request
generates its answer, up to --max-tokens tokens (with --ignore-eos exactly that many: past the end of its answer the model
writes unrelated chat turns, which are not the task). Greedy replies are the same with and without speculation, so both
arms time the same tokens. Prints one JSON line per (spec, concurrency) and a summary.

  bench/spec/spec_bench.py --bin build/bin/tessera --model models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
  bench/spec/spec_bench.py --spec draft --draft-model models-cache/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

CODE = '''def count_words(path):
    counts = {}
    with open(path) as f:
        for line in f:
            for word in line.split():
                word = word.lower().strip('.,;:!?')
                counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)


def top_words(path, n=10):
    ranked = count_words(path)
    return [word for word, count in ranked[:n]]
'''

TASKS = [
    "Rewrite this Python code, renaming `counts` to `frequencies` and `ranked` to `ordered`. Keep everything else the same.",
    "Rewrite this Python code with type hints and a docstring for each function. Keep everything else the same.",
    "Add a comment above every line of this Python code. Keep the code itself unchanged.",
    "Rewrite this Python code so that `top_words` takes `min_count` as well. Keep everything else the same.",
    "Repeat this Python code exactly as it is.",
]


def start_server(args, spec):
    cmd = [args.bin, "serve", "-m", args.model, "--port", "0", "-c", str(args.ctx)]
    if spec != "off":
        cmd += ["--spec", spec, "--spec-k", str(args.k)] + args.spec_args.split()
    if spec == "draft":
        cmd += ["--draft-model", args.draft_model]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on"):
        p.kill()
        sys.exit(f"server did not start: {line!r}")
    port = int(line.strip().rsplit(":", 1)[1])
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):  # the model loads after the socket listens
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return p, url
        except Exception:
            time.sleep(0.2)
    p.kill()
    sys.exit("server never became ready")


def post(url, body):
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def post_streamed(url, body):
    """Streams a chat completion: (completion tokens, seconds from the first token to the end)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    first = end = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and first is None:
                first = time.perf_counter()
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
        end = time.perf_counter()
    return tokens, (end - first) if first else 0.0


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line.startswith("tessera_spec_") and " " in line:
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out


def run(args, url, concurrency):
    bodies = [{
        "messages": [{"role": "user", "content": TASKS[args.task if args.task >= 0 else i % (len(TASKS) - 1)] + "\n\n```python\n" + CODE + "```"}],
        "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos, "temperature": args.temp, "seed": 1 + i,
    } for i in range(concurrency * args.rounds)]
    post(url, dict(bodies[0], max_tokens=8))  # warm-up
    tokens = [0] * len(bodies)
    decode_s = [0.0] * len(bodies)
    lock = threading.Lock()
    queue = list(range(len(bodies)))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            tokens[i], decode_s[i] = post_streamed(url, bodies[i])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    # Decode speed: the tokens after each request's first over the time from its first token to its
    # end (what a reader of the stream sees; prefill excluded). Meaningful at concurrency 1.
    decode = sum(t - 1 for t in tokens if t > 1) / max(sum(decode_s), 1e-9)
    return sum(tokens), wall, decode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin/tessera")
    ap.add_argument("--model", default="models-cache/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-tokens tokens per request")
    ap.add_argument("--rounds", type=int, default=1, help="requests per client")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--task", type=int, default=-1, help="the task of every request (index into TASKS; -1: the rewrites in turn)")
    ap.add_argument("--spec-args", default="", help="more server flags with --spec, e.g. --spec-no-cost-gate")
    ap.add_argument("--spec", default="ngram", choices=["ngram", "draft"], help="the proposer compared with no speculation")
    ap.add_argument("--draft-model", default="", help="--spec draft: the draft GGUF (the target's vocabulary)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run the pair (off, spec) this many times, alternating, and report each round's ratio and the median")
    args = ap.parse_args()
    if args.spec == "draft" and not args.draft_model:
        sys.exit("--spec draft needs --draft-model")
    results, decodes = {}, {}
    for rnd in range(args.repeat):
        for spec in ["off", args.spec]:
            for c in args.concurrency:
                p, url = start_server(args, spec)
                try:
                    toks, wall, decode = run(args, url, c)
                    m = metrics(url)
                finally:
                    p.terminate()
                    p.wait()
                results.setdefault((spec, c), []).append(toks / wall)
                decodes.setdefault((spec, c), []).append(decode)
                print(json.dumps({"round": rnd, "spec": spec, "concurrency": c, "tokens": toks, "seconds": round(wall, 2),
                                  "tok_per_s": round(toks / wall, 1), "decode_tok_per_s": round(decode, 1),
                                  "acceptance": m.get("tessera_spec_acceptance_rate"),
                                  "mean_accepted": m.get("tessera_spec_mean_accepted_length"),
                                  "steps_with_drafts": m.get("tessera_spec_steps_total"),
                                  "steps_off_batch": m.get("tessera_spec_steps_off_batch_total"),
                                  "steps_off_cost": m.get("tessera_spec_steps_off_cost_total"),
                                  "propose_s": m.get("tessera_spec_propose_seconds_total")}), flush=True)
    for c in args.concurrency:
        for what, res in (("end to end", results), ("decode", decodes)):
            ratios = [s / o for s, o in zip(res[(args.spec, c)], res[("off", c)])]
            best = max(res[(args.spec, c)]) / max(res[("off", c)])
            print(f"concurrency {c}, {what}: {args.spec} / off = " + ", ".join(f"{r:.2f}x" for r in ratios) +
                  f" (median {statistics.median(ratios):.2f}x over {len(ratios)} alternating rounds; "
                  f"best round of each {best:.2f}x)")


if __name__ == "__main__":
    main()
