#!/usr/bin/python3
"""The Accelerator against its peers, side by side in one script.

Runs build/bench/accelerator_bench (raw LibTorch and the Accelerator, the
arms alternating step by step in one process) and the same loop in Python
with Debian's torch 1.13 and the torch.amp recipe (784-128-128-10 MLP,
batch 32, AdamW, fp32 and bf16 autocast on the CPU), in alternating rounds,
and prints the median step times and the ratios:

  accelerator / raw LibTorch   (target <= 1.03; both call AdamW's step)
  accelerator / Python         (target <= 0.70), with AdamW's own step and
                               with the Accelerator's fused step (its default)

  /usr/bin/python3 bench/accelerator_peer.py [--bench build/bench/accelerator_bench]
      [--threads 1] [--steps 3000] [--rounds 3] [--set-to-none]

Every arm clears gradients the same way: in place (1.13's default) or, with
--set-to-none, to undefined (PyTorch 2.x's default and the Accelerator's).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    sys.exit("accelerator_peer.py: needs Debian's python3-torch (run it with /usr/bin/python3)")


def python_loop(precision, steps, set_to_none, warmup=100):
    """Median ms per step of the torch.amp recipe."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    torch.manual_seed(1)
    xs = [torch.randn(32, 784) for _ in range(64)]
    ys = [torch.randint(10, (32,)) for _ in range(64)]
    bf16 = precision == "bf16"
    times = []
    for s in range(warmup + steps):
        x, y = xs[s % 64], ys[s % 64]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=set_to_none)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if s >= warmup:
            times.append((t1 - t0) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="build/bench/accelerator_bench")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set-to-none", action="store_true",
                        help="zero_grad(set_to_none=True) in every arm (PyTorch 2.x's default)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rows = {p: {"raw_ms": [], "accelerator_ms": [], "fused_ms": [], "python_ms": []}
            for p in ("no", "bf16")}
    for r in range(args.rounds):
        cmd = [args.bench, "--json", "--threads", str(args.threads), "--steps", str(args.steps)]
        if args.set_to_none:
            cmd.append("--set-to-none")
        cpp = json.loads(subprocess.run(
            cmd, check=True, capture_output=True, text=True).stdout)
        fused = json.loads(subprocess.run(
            cmd + ["--fused", "--arm", "accelerator"],
            check=True, capture_output=True, text=True).stdout)
        for p in ("no", "bf16"):
            rows[p]["raw_ms"].append(cpp[p]["raw_ms"])
            rows[p]["accelerator_ms"].append(cpp[p]["accelerator_ms"])
            rows[p]["fused_ms"].append(fused[p]["accelerator_ms"])
            rows[p]["python_ms"].append(python_loop(p, args.steps, args.set_to_none))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{p}: raw {rows[p]['raw_ms'][-1]:.4f} accel {rows[p]['accelerator_ms'][-1]:.4f} "
            f"fused {rows[p]['fused_ms'][-1]:.4f} "
            f"python {rows[p]['python_ms'][-1]:.4f} ms" for p in rows), flush=True)

    print(f"\nMLP 784-128-128-10, batch 32, AdamW, {args.threads} thread(s), "
          f"{args.steps} steps per arm, zero_grad {'set_to_none' if args.set_to_none else 'in place'}, "
          f"median of {args.rounds} rounds (ms per step)")
    print(f"{'precision':<10}{'raw C++':>10}{'Accelerator':>13}{'fused':>9}{'Python':>10}"
          f"{'accel/raw':>11}{'accel/python':>14}{'fused/python':>14}")
    for p, v in rows.items():
        raw = statistics.median(v["raw_ms"])
        acc = statistics.median(v["accelerator_ms"])
        fus = statistics.median(v["fused_ms"])
        py = statistics.median(v["python_ms"])
        print(f"{p:<10}{raw:>10.4f}{acc:>13.4f}{fus:>9.4f}{py:>10.4f}"
              f"{acc / raw:>11.3f}{acc / py:>14.3f}{fus / py:>14.3f}")


if __name__ == "__main__":
    main()
