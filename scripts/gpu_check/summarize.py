#!/usr/bin/env python3
"""Turns the GPU check's out/ folder into results.json (and, when the run is
done, a table on stderr). run.sh calls it after every check with --status
running, and once more at the end. Every expected check is listed: one that
has not run reads as not run, which counts as failed at the end.
Exit 0 when every expected check ran and passed and the derived checks hold
(a dry run: when every expected check is accounted for), else 1."""
import argparse
import json
import os
import statistics
import sys

LOG_TAIL_BYTES = 2048

# Datasheet dense (no sparsity) BF16/FP16 tensor-core peaks, the MFU
# denominator nanoGPT and papers use; matched on the device name, most
# specific first.
PEAKS = [
    ("H100 PCIe", 756e12, "NVIDIA H100 PCIe datasheet: 1513 TFLOPS bf16 with sparsity, 756 dense"),
    ("H100 NVL", 835e12, "NVIDIA H100 NVL datasheet: 1671 TFLOPS bf16 with sparsity, 835 dense"),
    ("H200 NVL", 835e12, "NVIDIA H200 NVL datasheet: 1671 TFLOPS bf16 with sparsity, 835 dense"),
    ("H100", 989.4e12, "NVIDIA H100 SXM datasheet: 1979 TFLOPS bf16 with sparsity, 989.4 dense"),
    ("H200", 989.4e12, "NVIDIA H200 SXM datasheet: 1979 TFLOPS bf16 with sparsity, 989.4 dense"),
    ("A100", 312e12, "NVIDIA A100 datasheet: 624 TFLOPS bf16 with sparsity, 312 dense"),
]
GPT_MODES = ("fp32_strict", "fp32_tf32", "fp16", "bf16")
MIXED = ("fp16", "bf16")


def peak_for(gpu):
    for key, flops, source in PEAKS:
        if key in gpu:
            return flops, source
    return None, "no datasheet peak known for '%s': MFU not reported" % gpu


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json_line(path):
    try:
        lines = [l for l in open(path) if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def log_tail(path):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--results", required=True)
    ap.add_argument("--gpu", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--status", required=True)
    ap.add_argument("--pairs", type=int, required=True)
    ap.add_argument("--expected", required=True)
    a = ap.parse_args()
    out, dry, final = a.out, a.status == "dry_run", a.status != "running"

    checks = {name: {"ran": False, "passed": False} for name in a.expected.split()}
    try:
        rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(out, "checks.tsv"))]
    except OSError:
        rows = []
    total_seconds = 0
    for name, rc, secs in rows:
        c = {"ran": True, "passed": rc == "0", "exit_code": int(rc), "seconds": int(secs),
             "log": "out/%s.log" % name}
        if rc != "0":
            c["log_tail"] = log_tail(os.path.join(out, name + ".log"))
            if rc in ("124", "137"):
                c["timed_out"] = True
        checks[name] = c
        total_seconds += int(secs)
    problems = [n for n, c in checks.items() if not c["passed"] and (c["ran"] or final)]
    derived = {}

    def derive(name, ok, **facts):
        derived[name] = dict(passed=bool(ok), **facts)
        if not ok and not dry and final:
            problems.append(name)

    # Every example ran on the GPU, not quietly on the CPU.
    cnn = {mp: read_json(os.path.join(out, "cnn_%s" % mp, "summary.json")) for mp in ("no", "fp16", "bf16")}
    gpt = {(m, i): read_json(os.path.join(out, "gpt_%s_%d" % (m, i), "summary.json"))
           for m in GPT_MODES for i in range(1, a.pairs + 1)}
    devices = {"cnn_" + mp: s.get("device", "?") for mp, s in cnn.items() if s}
    no_prefetch = read_json(os.path.join(out, "cnn_bf16_no_prefetch", "summary.json"))
    if no_prefetch:
        devices["cnn_bf16_no_prefetch"] = no_prefetch.get("device", "?")
    devices.update({"gpt_ampkit_%s_%d" % k: s.get("device", "?") for k, s in gpt.items() if s})
    small = {run: read_json(os.path.join(out, "gpt_%s_small_bf16" % run, "summary.json"))
             for run in ("plain", "fsdp")}
    devices.update({"gpt_%s_small_bf16" % run: s.get("device", "?") for run, s in small.items() if s})
    on_cpu = sorted(n for n, d in devices.items() if not d.startswith("cuda"))
    if devices or final:
        derive("examples_ran_on_cuda", devices and not on_cpu, devices=devices, not_on_cuda=on_cpu)

    # The demo CNN: fp16 and bf16 within 1 point of fp32 after 3 epochs.
    accuracy = {mp: s["test_accuracy"] for mp, s in cnn.items() if s}
    if "no" in accuracy or final:
        for mp in MIXED:
            derive("cnn_%s_within_1_point_of_fp32" % mp,
                   "no" in accuracy and mp in accuracy and abs(accuracy[mp] - accuracy["no"]) <= 0.01,
                   accuracy=accuracy.get(mp), fp32_accuracy=accuracy.get("no"))
    # The prefetching loader against copies made as batches are handed out.
    plain = read_json(os.path.join(out, "cnn_bf16_no_prefetch", "summary.json"))
    if plain and cnn.get("bf16"):
        derived["cnn_bf16_prefetch_speedup"] = {
            "passed": True,
            "samples_per_second_prefetch": cnn["bf16"]["samples_per_second"],
            "samples_per_second_no_prefetch": plain["samples_per_second"],
            "ratio": cnn["bf16"]["samples_per_second"] / plain["samples_per_second"]}
    # FSDP (FULL_SHARD, prefetch, activation checkpointing) against the
    # plain run of the same model: the loss within bf16's reach, and what
    # it costs in step time and saves in memory.
    if (small["plain"] and small["fsdp"]) or final:
        plain_run, fsdp_run = small["plain"] or {}, small["fsdp"] or {}
        ratio = lambda key: (fsdp_run[key] / plain_run[key]
                             if plain_run.get(key) and fsdp_run.get(key) else None)
        loss_gap = (abs(fsdp_run["val_loss"] - plain_run["val_loss"])
                    if "val_loss" in fsdp_run and "val_loss" in plain_run else None)
        derive("fsdp_small_bf16", loss_gap is not None and loss_gap <= 0.1,
               val_loss_plain=plain_run.get("val_loss"), val_loss_fsdp=fsdp_run.get("val_loss"),
               tokens_per_second_fsdp_over_plain=ratio("tokens_per_second"),
               peak_step_bytes_fsdp_over_plain=ratio("peak_step_bytes"),
               activation_bytes_fsdp_over_plain=ratio("activation_bytes"))
    # auto_log's NVML readings in the fp32 run's metrics.
    gpu_memory = gpu_util = 0.0
    try:
        for line in open(os.path.join(out, "cnn_no", "metrics.jsonl")):
            row = json.loads(line)
            gpu_memory = max(gpu_memory, row.get("gpu_memory_mb", 0))
            gpu_util = max(gpu_util, row.get("gpu_utilization", 0))
    except (OSError, ValueError):
        pass
    if cnn.get("no") or final:
        derive("auto_log_nvml_non_zero", gpu_memory > 0 and gpu_util > 0,
               max_gpu_memory_mb=gpu_memory, max_gpu_utilization=gpu_util)

    # GPT-2 small: tokens/s per side as medians over the pairs, the step
    # time ratio per pair (Python's tokens/s over ampkit's), MFU for the
    # mixed precisions against the datasheet peak.
    peak, peak_source = peak_for(a.gpu)
    bench = {"model": "GPT-2 small (124M), context 1024, batch 16, eager",
             "pairs": a.pairs, "order": "ampkit first in odd pairs, Python first in even pairs",
             "peak_flops": peak, "peak_source": peak_source,
             "flops_per_token": "6 N + 12 L T C, N without the position embedding (nanoGPT)",
             "ampkit": {}, "python": {}, "step_time_ampkit_over_python": {}}
    for m in GPT_MODES:
        ours, theirs, ratios, flops = [], [], [], None
        for i in range(1, a.pairs + 1):
            s = gpt[(m, i)]
            p = last_json_line(os.path.join(out, "gpt_python_%s_%d.log" % (m, i)))
            if s:
                ours.append(s["tokens_per_second"])
                flops = s["flops_per_token"]
            if p:
                theirs.append(p["tokens_per_second"])
            if s and p:
                ratios.append(p["tokens_per_second"] / s["tokens_per_second"])
        if ours:
            bench["ampkit"][m] = {"tokens_per_second": spread(ours)}
            if m in MIXED and peak:
                bench["ampkit"][m]["mfu"] = statistics.median(ours) * flops / peak
        if theirs:
            bench["python"][m] = {"tokens_per_second": spread(theirs)}
            if m in MIXED and peak and flops:
                bench["python"][m]["mfu"] = statistics.median(theirs) * flops / peak
        if ratios:
            bench["step_time_ampkit_over_python"][m] = spread(ratios)
    med = lambda side, m: bench[side].get(m, {}).get("tokens_per_second", {}).get("median")
    if med("ampkit", "bf16") and med("ampkit", "fp32_tf32"):
        bench["ampkit_bf16_over_tf32"] = med("ampkit", "bf16") / med("ampkit", "fp32_tf32")
    if med("ampkit", "bf16") and med("ampkit", "fp32_strict"):
        bench["ampkit_bf16_over_strict_fp32"] = med("ampkit", "bf16") / med("ampkit", "fp32_strict")
    bench["targets"] = {
        "step_at_most_0.95x_python_bf16":
            bench["step_time_ampkit_over_python"].get("bf16", {}).get("median", 9) <= 0.95,
        "mfu_at_least_40_percent_bf16": bench["ampkit"].get("bf16", {}).get("mfu", 0) >= 0.40,
    }

    missing = [n for n, c in checks.items() if not c["ran"]]
    passed = (not missing) if dry else (final and not problems)
    results = {"status": a.status, "gpu": a.gpu, "torch": a.torch, "passed": passed,
               "problems": problems, "not_run": missing, "seconds": total_seconds,
               "checks": checks, "derived": derived, "benchmark": bench}
    tmp = a.results + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2)
    os.replace(tmp, a.results)
    if not final:
        return 0
    for name, c in list(checks.items()) + list(derived.items()):
        state = ("ok" if c["passed"] else "not run" if not c.get("ran", True)
                 else "not evaluated (dry run)" if dry else "FAILED")
        print("%-40s %s" % (name, state), file=sys.stderr)
    for m in GPT_MODES:
        o, p = med("ampkit", m), med("python", m)
        print("gpt2 %-11s ampkit %9.0f tok/s  python %9.0f tok/s  MFU %s" % (
            m, o or 0, p or 0, "%.1f%%" % (100 * bench["ampkit"][m]["mfu"])
            if "mfu" in bench["ampkit"].get(m, {}) else "-"), file=sys.stderr)
    print("gpu_check: %s; results in %s (%d s)" % (
        "all checks passed" if passed else "FAILED: " + ", ".join(problems + missing),
        a.results, total_seconds), file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
