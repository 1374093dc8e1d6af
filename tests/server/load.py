#!/usr/bin/env python3
"""A small serving load generator for an OpenAI-compatible server (tessera serve or any other).

Sends N streaming requests at a fixed concurrency with the official `openai` client and reports
throughput and latency percentiles: TTFT (request start -> first text chunk), TPOT (mean time
per output token after the first, per request) and E2E. tessera-bench can call it:

  python3 tests/server/load.py --base-url http://127.0.0.1:8080/v1 --requests 200 \
      --concurrency 32 --max-tokens 32 --json out.json
"""
import argparse
import concurrent.futures as futures
import json
import random
import statistics
import sys
import time


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(client, model, i, args):
    rng = random.Random(args.seed + i)
    words = ["alpha", "beta", "gamma", "delta", "tessera", "block", "cache", "token"]
    prompt = args.prefix + " ".join(rng.choice(words) for _ in range(rng.randint(4, args.prompt_words)))
    t0 = time.perf_counter()
    first = None
    stamps = []
    n_tokens = 0
    finish = None
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=args.max_tokens, stream=True,
                                       temperature=args.temperature, seed=args.seed + i,
                                       stream_options={"include_usage": True})
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            n_tokens = chunk.usage.completion_tokens
        for c in chunk.choices:
            if c.text:
                if first is None:
                    first = now
                stamps.append(now)
            if c.finish_reason:
                finish = c.finish_reason
    end = time.perf_counter()
    ttft = (first if first is not None else end) - t0
    tpot = (stamps[-1] - first) / (n_tokens - 1) if first is not None and n_tokens > 1 else None
    return {"ttft": ttft, "tpot": tpot, "e2e": end - t0, "tokens": n_tokens, "finish": finish}


def run_load(base_url, requests=200, concurrency=32, max_tokens=32, prompt_words=24, temperature=0.7, seed=1,
             prefix="", api_key="none", model=None):
    import openai
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=5, timeout=600)
    if model is None:
        model = client.models.list().data[0].id
    args = argparse.Namespace(max_tokens=max_tokens, prompt_words=prompt_words, temperature=temperature, seed=seed,
                              prefix=prefix)
    t0 = time.perf_counter()
    with futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda i: one_request(client, model, i, args), range(requests)))
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    ttft = [r["ttft"] * 1e3 for r in results]
    tpot = [r["tpot"] * 1e3 for r in results if r["tpot"] is not None]
    e2e = [r["e2e"] * 1e3 for r in results]
    return {
        "requests": requests, "concurrency": concurrency, "completed": sum(1 for r in results if r["finish"]),
        "wall_s": wall, "output_tokens": tokens, "output_tokens_per_s": tokens / wall,
        "ttft_ms_p50": percentile(ttft, 50), "ttft_ms_p99": percentile(ttft, 99),
        "tpot_ms_p50": percentile(tpot, 50), "tpot_ms_p99": percentile(tpot, 99),
        "e2e_ms_p50": percentile(e2e, 50), "e2e_ms_p99": percentile(e2e, 99),
        "e2e_ms_mean": statistics.fmean(e2e) if e2e else float("nan"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default=None, help="model id (default: the first of /v1/models)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=24)
    ap.add_argument("--prefix", default="", help="a shared prompt prefix (exercises prefix caching)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the report here too")
    a = ap.parse_args()
    report = run_load(a.base_url, a.requests, a.concurrency, a.max_tokens, a.prompt_words, a.temperature, a.seed,
                      a.prefix, model=a.model)
    text = json.dumps(report, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0 if report["completed"] == report["requests"] else 1


if __name__ == "__main__":
    sys.exit(main())
