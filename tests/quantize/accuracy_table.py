#!/usr/bin/env python3
"""Accuracy of every weight format on SmolLM2-135M-Instruct: the docs/quant.md table.

The baseline is the model dequantised to F32 (`tessera quantize --type f32` from the Q4_1 GGUF).
Each format is quantised from that baseline with the default rules, then scored with
`tessera perplexity --kl-base` on a fixed public-domain text. Rerun it when kernels land:

  python3 tests/quantize/accuracy_table.py --bin build/bin \
      --model models-cache/SmolLM2-135M-Instruct.Q4_1.gguf \
      --text tests/data/text/alice_ch1.txt --work /tmp/tessera-acc --update-doc docs/quant.md

A format may carry options after colons: `calib` quantises with GPTQ calibrated on --calib-text
(`tessera quantize --calib`), `head=TYPE` sets `--output-type TYPE`; e.g. `fp8_e4m3:calib` or
`fp8_e4m3:head=fp8_e4m3`. Their rows name the variant; plain names are round-to-nearest with the
default rules.

Needs about 0.4 GB of disk per format at a time plus the 0.3 GB baseline logit file. Results
are kept in WORK/results.json as each format finishes: --reuse keeps the baseline and the formats
already measured, --render-only rebuilds the table from that file.
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import time

FORMATS = ["f16", "bf16", "q8_0", "int8_pc", "int8_pc:calib", "fp8_e4m3", "fp8_e4m3:calib", "fp8_e4m3:head=fp8_e4m3",
           "fp8_e4m3:calib:head=fp8_e4m3", "fp8_e5m2", "fp8_e5m2:calib", "fp8_e5m2:head=fp8_e5m2", "q6_k", "q5_1", "q5_k", "q5_0",
           "q4_1", "int4_g32", "q4_k", "q4_0", "q4_0:calib", "nvfp4", "int4_g64", "mxfp4", "int4_g128",
           "int4_g128:calib"]
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"


def run(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, time.time() - t0


def split_variant(entry):
    """'fp8_e4m3:calib:head=f16' -> ('fp8_e4m3', extra quantize args, variant text for the table)."""
    fmt, *opts = entry.split(":")
    extra, words = [], []
    for o in opts:
        if o == "calib":
            extra += ["--calib", "{calib}"]
            words.append("GPTQ")
        elif o.startswith("head="):
            extra += ["--output-type", o[5:]]
            words.append(f"head {o[5:]}")
        else:
            raise SystemExit(f"{entry}: unknown option '{o}' (calib, head=TYPE)")
    return fmt, extra, ", ".join(words) if words else "RTN"


def quantize(args, src, dst, entry):
    fmt, extra, _ = split_variant(entry)
    extra = [a.replace("{calib}", args.calib_text) for a in extra]
    rc, out, err, secs = run([f"{args.bin}/tessera", "quantize", src, dst, "--type", fmt] + extra)
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


def baseline_from_logits(path):
    """The baseline's perplexity and scored count from a logit file's header (see logit_file.h)."""
    with open(path, "rb") as f:
        h = f.read(64)
    n_scored, = struct.unpack_from("<Q", h, 32)
    mean_nll, = struct.unpack_from("<d", h, 56)
    return {"ppl": round(math.exp(mean_nll), 4), "tokens": n_scored, "secs": 0}


def fmt_kl(x):
    return f"{x:.5f}" if x >= 1e-3 else f"{x:.2e}"


def mix_of(plan, fmt):
    """'f32 61, q4_k 30, q5_0 180, q8_0 1' -> '30 q4_k, 180 q5_0, 1 q8_0' (f32 norms left out)."""
    fmt = fmt.split(":")[0]
    parts = [p.split() for p in plan.split(", ") if p]
    return ", ".join(f"{n} {t}" for t, n in parts if t != "f32" or fmt == "f32")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", default="models-cache/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--text", default="tests/data/text/alice_ch1.txt")
    ap.add_argument("--calib-text", default="tests/data/text/alice_ch2.txt",
                    help="calibration text of the ':calib' variants (not the scored text)")
    ap.add_argument("--work", default="/tmp/tessera-acc")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--reuse", action="store_true", help="keep the baseline and the results in WORK")
    ap.add_argument("--render-only", action="store_true", help="only print the table from WORK/results.json")
    ap.add_argument("--update-doc", help="rewrite the table between the accuracy-table markers of this file")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    base_gguf, base_logits = f"{args.work}/base-f32.gguf", f"{args.work}/base.logits"
    results_path = f"{args.work}/results.json"
    results = json.load(open(results_path)) if (args.reuse or args.render_only) and os.path.exists(results_path) else {}

    def save():
        json.dump(results, open(results_path, "w"), indent=1)

    if not args.render_only:
        if args.reuse and os.path.exists(base_gguf) and os.path.exists(base_logits):
            results["base"] = {"size": os.path.getsize(base_gguf), "r": baseline_from_logits(base_logits), "mix": "all f32"}
        else:
            quantize(args, args.model, base_gguf, "f32")
            r = perplexity(args, base_gguf, ["--save-logits", base_logits])
            results = {"base": {"size": os.path.getsize(base_gguf), "r": r, "mix": "all f32"}}
        save()
        base = results["base"]["r"]
        print(f"baseline f32: ppl {base['ppl']:.4f} over {base['tokens']} tokens", file=sys.stderr)
        if "q4_1 source file" not in results:
            r = perplexity(args, args.model, ["--kl-base", base_logits])
            results["q4_1 source file"] = {"size": os.path.getsize(args.model), "r": r,
                                           "mix": "the original GGUF: 210 q4_1, 1 q8_0"}
            save()
        for fmt in args.formats.split(","):
            if fmt in results and results[fmt]["r"] is not None:
                continue
            out = f"{args.work}/{fmt.replace(':', '-').replace('=', '-')}.gguf"
            try:
                plan, qsecs = quantize(args, base_gguf, out, fmt)
                r = perplexity(args, out, ["--kl-base", base_logits])
                results[fmt] = {"size": os.path.getsize(out), "r": r, "mix": mix_of(plan, fmt)}
                print(f"{fmt}: ppl {r['ppl']:.4f} kl {fmt_kl(r.get('kl', 0))} top1 {r.get('top1', 0):.2f} "
                      f"(quantize {qsecs:.0f} s, perplexity {r['secs']:.0f} s)", file=sys.stderr)
            except RuntimeError as e:
                results[fmt] = {"size": 0, "r": None, "mix": str(e)}
                print(f"{fmt}: {e}", file=sys.stderr)
            finally:
                if os.path.exists(out):
                    os.remove(out)
            save()
    base = results["base"]["r"]
    order = ["base", "q4_1 source file"] + args.formats.split(",")
    rows = []
    for k in order:
        if k not in results:
            continue
        name, variant = ("f32 (baseline)", "") if k == "base" else (k, "")
        if k not in ("base", "q4_1 source file"):
            name, _, variant = split_variant(k)
        rows.append((name, variant, results[k]["size"], results[k]["r"], results[k]["mix"]))

    lines = ["| format | variant | file MB | perplexity | ppl change | mean KL (± s.e.) | p99 KL | top-1 agreement | tensors (norms stay f32) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, variant, size, r, mix in rows:
        if r is None:
            lines.append(f"| {name} | {variant} | | | | | | | not run: {mix} |")
            continue
        change = 100.0 * (r["ppl"] / base["ppl"] - 1.0)
        kl = f"{fmt_kl(r['kl'])} ± {fmt_kl(r['kl_se'])}" if "kl" in r else "0 (itself)"
        p99 = fmt_kl(r["kl_p99"]) if "kl" in r else ""
        top1 = f"{r['top1']:.2f} %" if "top1" in r else "100 %"
        lines.append(f"| {name} | {variant} | {size / 1e6:.1f} | {r['ppl']:.4f} | {change:+.2f} % | {kl} | {p99} | {top1} | {mix} |")
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
