#!/usr/bin/env python3
"""Scale-out figures: the same multi-turn session script through vllm-router over N `tessera
serve` replicas, once per routing policy, on loopback. Prints, per policy, the fleet's prefix-cache
hit rate (from each replica's vllm:prefix_cache_{hits,queries}_total), TTFT p50/p99 as the client
sees it through the router, and how the requests split over the replicas. Figures, not a test:
nothing is asserted (tests/server/test_router.py checks behaviour). docs/scale-out.md.

  .venv/bin/python bench/scaleout/router_bench.py --bin build/bin \\
      --model models-cache/SmolLM2-135M-Instruct.Q4_1.gguf [--replicas 2] [--sessions 8] [--turns 3]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fleet import Replica, Router, percentile, run_sessions  # noqa: E402


def run_policy(args, policy):
    replicas = [Replica(args.bin, args.model, "m", "-c", str(args.ctx)) for _ in range(args.replicas)]
    router = None
    try:
        router = Router(args.router, replicas, policy)
        before = [r.metrics() for r in replicas]
        t0 = time.time()
        results = run_sessions(router.port, "m", args.sessions, args.turns, args.prefix_words, args.max_tokens,
                               args.concurrency, timeout=args.timeout)
        wall = time.time() - t0
        after = [r.metrics() for r in replicas]
    finally:
        if router:
            router.stop()
        for r in replicas:
            r.stop()

    def delta(i, name):
        return after[i].get(name, 0) - before[i].get(name, 0)

    hits = sum(delta(i, "vllm:prefix_cache_hits_total") for i in range(len(replicas)))
    queries = sum(delta(i, "vllm:prefix_cache_queries_total") for i in range(len(replicas)))
    share = [int(delta(i, "vllm:e2e_request_latency_seconds_count")) for i in range(len(replicas))]
    ttft = [r["ttft"] for r in results if r["ok"] and r["ttft"] is not None]
    return {"policy": policy, "requests": len(results), "errors": sum(not r["ok"] for r in results),
            "hit_rate": hits / queries if queries else 0.0, "prompt_tokens": int(queries),
            "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99), "share": share, "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", default="models-cache/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--router", default=os.path.join(os.path.dirname(sys.executable), "vllm-router"))
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--prefix-words", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=4096, help="-c of each replica (KV tokens)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per request")
    ap.add_argument("--policies", nargs="+", default=["cache_aware", "round_robin"])
    args = ap.parse_args()
    rows = [run_policy(args, p) for p in args.policies]
    print(f"{args.replicas} replicas, {args.sessions} sessions x {args.turns} turns, ~{args.prefix_words}-word prefix per "
          f"session, {args.max_tokens} tokens per answer, {args.concurrency} sessions at a time")
    print(f"{'policy':<12} {'requests':>8} {'errors':>6} {'hit rate':>8} {'prompt tok':>10} {'TTFT p50':>9} {'TTFT p99':>9} "
          f"{'wall s':>7}  requests per replica")
    for r in rows:
        print(f"{r['policy']:<12} {r['requests']:>8} {r['errors']:>6} {r['hit_rate']:>8.1%} {r['prompt_tokens']:>10} "
              f"{r['ttft_p50'] * 1e3:>7.0f}ms {r['ttft_p99'] * 1e3:>7.0f}ms {r['wall']:>7.1f}  {r['share']}")


if __name__ == "__main__":
    main()
