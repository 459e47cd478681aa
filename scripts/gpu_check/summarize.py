#!/usr/bin/env python3
"""Turns the GPU check's out/ folder into results.json and a table on
stderr. Usage: summarize.py OUT_DIR RESULTS_JSON GPU_NAME TORCH_VERSION.
Exit 0 when every check passed and the CNN accuracies agree, else 1."""
import json
import os
import sys

# Dense bf16 matmul measured on an H200 (about 790 TFLOP/s; the data sheet
# says 989): the MFU denominator.
PEAK_FLOPS = 790e12


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


def main():
    out, results_path, gpu, torch_version = sys.argv[1:5]
    checks = {}
    for line in open(os.path.join(out, "checks.tsv")):
        name, rc, secs = line.rstrip("\n").split("\t")
        checks[name] = {"passed": rc == "0", "exit_code": int(rc), "seconds": int(secs),
                        "log": "out/%s.log" % name}
    problems = [n for n, c in checks.items() if not c["passed"]]

    # The demo CNN: fp16 and bf16 within 1 point of fp32 after 3 epochs.
    cnn = {mp: read_json(os.path.join(out, "cnn_%s" % mp, "summary.json")) for mp in ("no", "fp16", "bf16")}
    accuracy = {mp: s["test_accuracy"] for mp, s in cnn.items() if s}
    if "no" in accuracy:
        for mp in ("fp16", "bf16"):
            ok = mp in accuracy and abs(accuracy[mp] - accuracy["no"]) <= 0.01
            checks["cnn_%s_within_1_point_of_fp32" % mp] = {"passed": ok, "accuracy": accuracy.get(mp),
                                                            "fp32_accuracy": accuracy["no"]}
            if not ok:
                problems.append("cnn_%s_within_1_point_of_fp32" % mp)
    # auto_log's NVML readings in the fp32 run's metrics.
    gpu_memory = gpu_util = 0.0
    try:
        for line in open(os.path.join(out, "cnn_no", "metrics.jsonl")):
            row = json.loads(line)
            gpu_memory = max(gpu_memory, row.get("gpu_memory_mb", 0))
            gpu_util = max(gpu_util, row.get("gpu_utilization", 0))
    except (OSError, ValueError):
        pass
    checks["auto_log_nvml_non_zero"] = {"passed": gpu_memory > 0 and gpu_util > 0,
                                        "max_gpu_memory_mb": gpu_memory,
                                        "max_gpu_utilization": gpu_util}
    if not checks["auto_log_nvml_non_zero"]["passed"]:
        problems.append("auto_log_nvml_non_zero")

    # GPT-2 small: tokens/s, ratios, MFU.
    bench = {"model": "GPT-2 small (124M), context 1024, batch 16, eager", "peak_flops": PEAK_FLOPS,
             "ampkit": {}, "python": {}}
    flops_per_token = None
    for mp in ("no", "fp16", "bf16"):
        a = read_json(os.path.join(out, "gpt_%s" % mp, "summary.json"))
        p = last_json_line(os.path.join(out, "gpt_python_%s.log" % mp))
        if a:
            flops_per_token = a["flops_per_token"]
            bench["ampkit"][mp] = {"tokens_per_second": a["tokens_per_second"],
                                   "mfu": a["tokens_per_second"] * a["flops_per_token"] / PEAK_FLOPS,
                                   "skipped_steps": a["skipped_steps"]}
        if p:
            bench["python"][mp] = {"tokens_per_second": p["tokens_per_second"], "runner": p["runner"]}
            if flops_per_token:
                bench["python"][mp]["mfu"] = p["tokens_per_second"] * flops_per_token / PEAK_FLOPS
    ratios = {}
    for mp in ("no", "fp16", "bf16"):
        if mp in bench["ampkit"] and mp in bench["python"]:
            # Step time ampkit / Python = Python's tokens/s over ampkit's.
            ratios["step_time_ampkit_over_python_%s" % mp] = (
                bench["python"][mp]["tokens_per_second"] / bench["ampkit"][mp]["tokens_per_second"])
    if "bf16" in bench["ampkit"] and "no" in bench["ampkit"]:
        ratios["ampkit_bf16_over_fp32"] = (bench["ampkit"]["bf16"]["tokens_per_second"] /
                                           bench["ampkit"]["no"]["tokens_per_second"])
    bench["ratios"] = ratios
    bench["targets"] = {
        "bf16_at_least_2.5x_fp32": ratios.get("ampkit_bf16_over_fp32", 0) >= 2.5,
        "step_at_most_0.95x_python": ratios.get("step_time_ampkit_over_python_bf16", 9) <= 0.95,
        "mfu_at_least_40_percent": bench["ampkit"].get("bf16", {}).get("mfu", 0) >= 0.40,
    }

    results = {"gpu": gpu, "torch": torch_version, "passed": not problems, "problems": problems,
               "checks": checks, "benchmark": bench}
    with open(results_path, "w") as f:
        json.dump(results, f, indent=2)
    for name, c in checks.items():
        print("%-40s %s" % (name, "ok" if c["passed"] else "FAILED"), file=sys.stderr)
    for mp in ("no", "fp16", "bf16"):
        a, p = bench["ampkit"].get(mp, {}), bench["python"].get(mp, {})
        print("gpt2 %-4s ampkit %9.0f tok/s (MFU %4.1f%%)  python %9.0f tok/s" % (
            mp, a.get("tokens_per_second", 0), 100 * a.get("mfu", 0), p.get("tokens_per_second", 0)),
            file=sys.stderr)
    print("ratios:", json.dumps(ratios), "targets:", json.dumps(bench["targets"]), file=sys.stderr)
    print("gpu_check: %s; results in %s" % ("all checks passed" if not problems else
                                              "FAILED: " + ", ".join(problems), results_path), file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
