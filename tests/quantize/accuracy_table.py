#!/usr/bin/env python3
"""Accuracy of every weight format on SmolLM2-135M-Instruct: the docs/quant.md table.

The baseline is the model dequantised to F32 (`tessera quantize --type f32` from the Q4_1 GGUF).
Each format is quantised from that baseline with the default rules, then scored with
`tessera perplexity --kl-base` on a fixed public-domain text. Rerun it when kernels land:

  python3 tests/quantize/accuracy_table.py --bin build/bin \
      --model models-cache/SmolLM2-135M-Instruct.Q4_1.gguf \
      --text tests/data/text/alice_ch1.txt --work /tmp/tessera-acc --update-doc docs/quant.md

Needs about 0.4 GB of disk per format at a time plus the 0.3 GB baseline logit file.
"""
import argparse
import os
import re
import subprocess
import sys
import time

FORMATS = ["f16", "bf16", "q8_0", "int8_pc", "fp8_e4m3", "fp8_e5m2", "q6_k", "q5_1", "q5_k", "q5_0",
           "q4_1", "int4_g32", "q4_k", "q4_0", "nvfp4", "int4_g64", "mxfp4", "int4_g128"]
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"


def run(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, time.time() - t0


def quantize(args, src, dst, fmt):
    rc, out, err, secs = run([f"{args.bin}/tessera", "quantize", src, dst, "--type", fmt])
    if rc != 0:
        raise RuntimeError(f"quantize {fmt}: {err.strip().splitlines()[-1] if err.strip() else rc}")
    plan = re.search(r"plan: \d+ tensors \(([^)]*)\)", err)
    return plan.group(1) if plan else "", secs


def perplexity(args, model, extra):
    cmd = [f"{args.bin}/tessera", "perplexity", "-q", "-m", model, "-f", args.text, "-d", args.device,
           "--window", str(args.window)] + extra
    rc, out, err, secs = run(cmd)
    if rc != 0:
        raise RuntimeError(err.strip().splitlines()[-1] if err.strip() else f"exit {rc}")
    r = {"secs": secs}
    m = re.search(r"perplexity ([\d.]+) over (\d+) tokens", out)
    r["ppl"], r["tokens"] = float(m.group(1)), int(m.group(2))
    m = re.search(r"kl divergence: mean ([\d.e+-]+) \+/- ([\d.e+-]+), median ([\d.e+-]+), p99 ([\d.e+-]+), max ([\d.e+-]+)", out)
    if m:
        r["kl"], r["kl_se"], r["kl_p99"], r["kl_max"] = float(m.group(1)), float(m.group(2)), float(m.group(4)), float(m.group(5))
    m = re.search(r"top-1 agreement: ([\d.]+) %", out)
    if m:
        r["top1"] = float(m.group(1))
    return r


def mix_of(plan, fmt):
    """'f32 61, q4_k 30, q5_0 180, q8_0 1' -> '30 q4_k, 180 q5_0, 1 q8_0' (f32 norms left out)."""
    parts = [p.split() for p in plan.split(", ") if p]
    return ", ".join(f"{n} {t}" for t, n in parts if t != "f32" or fmt == "f32")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", default="models-cache/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--text", default="tests/data/text/alice_ch1.txt")
    ap.add_argument("--work", default="/tmp/tessera-acc")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--update-doc", help="rewrite the table between the accuracy-table markers of this file")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    base_gguf, base_logits = f"{args.work}/base-f32.gguf", f"{args.work}/base.logits"

    quantize(args, args.model, base_gguf, "f32")
    base = perplexity(args, base_gguf, ["--save-logits", base_logits])
    print(f"baseline f32: ppl {base['ppl']:.4f} over {base['tokens']} tokens ({base['secs']:.0f} s)", file=sys.stderr)
    rows = [("f32 (baseline)", os.path.getsize(base_gguf), base, "all f32")]
    src = perplexity(args, args.model, ["--kl-base", base_logits])
    rows.append(("q4_1 source file", os.path.getsize(args.model), src, "the original GGUF: 210 q4_1, 1 q8_0"))
    for fmt in args.formats.split(","):
        out = f"{args.work}/{fmt}.gguf"
        try:
            plan, qsecs = quantize(args, base_gguf, out, fmt)
            r = perplexity(args, out, ["--kl-base", base_logits])
            rows.append((fmt, os.path.getsize(out), r, mix_of(plan, fmt)))
            print(f"{fmt}: ppl {r['ppl']:.4f} kl {r.get('kl', 0):.5f} top1 {r.get('top1', 0):.2f} "
                  f"(quantize {qsecs:.0f} s, perplexity {r['secs']:.0f} s)", file=sys.stderr)
        except RuntimeError as e:
            rows.append((fmt, os.path.getsize(out) if os.path.exists(out) else 0, None, str(e)))
            print(f"{fmt}: {e}", file=sys.stderr)
        finally:
            if os.path.exists(out):
                os.remove(out)

    lines = ["| format | file MB | perplexity | ppl change | mean KL (± s.e.) | p99 KL | top-1 agreement | tensors (norms stay f32) |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, size, r, mix in rows:
        if r is None:
            lines.append(f"| {name} | | | | | | | not run: {mix} |")
            continue
        change = 100.0 * (r["ppl"] / base["ppl"] - 1.0)
        kl = f"{r['kl']:.5f} ± {r['kl_se']:.5f}" if "kl" in r else "0 (itself)"
        p99 = f"{r['kl_p99']:.4f}" if "kl" in r else ""
        top1 = f"{r['top1']:.2f} %" if "top1" in r else "100 %"
        lines.append(f"| {name} | {size / 1e6:.1f} | {r['ppl']:.4f} | {change:+.2f} % | {kl} | {p99} | {top1} | {mix} |")
    table = "\n".join(lines)
    print(table)
    if args.update_doc:
        doc = open(args.update_doc).read()
        if BEGIN not in doc or END not in doc:
            sys.exit(f"{args.update_doc}: no {BEGIN} ... {END} markers")
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        info = (f"\n{base['tokens']} scored tokens of `{args.text}` (windows of {args.window}), "
                f"device `{args.device}`, generated by `tests/quantize/accuracy_table.py`.\n\n")
        open(args.update_doc, "w").write(head + BEGIN + info + table + "\n" + END + tail)


if __name__ == "__main__":
    main()
