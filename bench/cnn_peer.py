#!/usr/bin/python3
"""The demo CNN in ampkit against the same model and loop in Python.

Four arms, each its own process, alternating (ampkit, torch, accelerate,
torch-cl) for fp32 and bf16, --rounds times; it prints the median samples/s
of each and the ratios. No environment variable is set for any arm.

  ampkit      build/examples/fashion_mnist/fashion_mnist --max-steps N
              (the demo as shipped: its loader, AdamW, warmup+cosine,
              autocast, the Accelerator's channels_last; samples/s over its
              training loop, from summary.json)
  torch       the same CNN, batch, AdamW and schedule in Python torch, with
              the torch.amp recipe (torch.autocast on the CPU for bf16)
  accelerate  the same loop with accelerate's Accelerator (prepare,
              accelerator.autocast, accelerator.backward)
  torch-cl    the torch arm with the model laid out channels-last by hand
              (model.to(memory_format=torch.channels_last)), which the
              demo gets from the Accelerator's channels_last option: how
              much of the lead that layout is

The Python arms draw their batches by slicing a shuffled in-memory tensor,
the fastest way Python has (a DataLoader over a TensorDataset collates
sample by sample and would slow them down); both time the same span as the
demo, from the first batch to the last step.

  /usr/bin/python3 bench/cnn_peer.py [--ampkit build/examples/fashion_mnist/fashion_mnist]
      [--accelerate-python ~/.cache/ampkit/peer-1.13/bin/python]
      [--steps 300] [--threads 2] [--rounds 3] [--precisions no,bf16]

accelerate runs from a virtual environment that sees Debian's torch:

  python3 -m venv --system-site-packages ~/.cache/ampkit/peer-1.13
  ~/.cache/ampkit/peer-1.13/bin/pip install accelerate==1.2.1

(1.2.1 is the newest accelerate whose requirements Debian's torch 1.13
meets; later ones need torch 2.)

--profile PRECISION (no or bf16) compares instead of timing: LibTorch's
profiler over the same steps (21 to 20 + --profile-steps) of the demo
(--profile-steps) and of the Python torch loop; it prints, per step, each
operator's calls and self CPU time on both sides, the largest first.
"""
import argparse
import gzip
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 64


def load_train(data_dir):
    import numpy as np
    import torch
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    x = torch.from_numpy(images.copy()).view(-1, 1, 28, 28).float().div_(255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def make_net():
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(32)
            self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(64)
            self.fc1 = nn.Linear(64 * 7 * 7, 128)
            self.dropout = nn.Dropout(0.25)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
            x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
            x = self.dropout(torch.relu(self.fc1(x.flatten(1))))
            return self.fc2(x)

    return Net()


PROFILE_AFTER = 20  # the demo's kProfileAfter


def python_arm(arm, precision, steps, threads, data_dir, profile_steps=0):
    """samples/s of the Python loop; `arm` is torch, torch-cl or accelerate. With
    profile_steps, the per-step operator table of steps PROFILE_AFTER + 1 to
    PROFILE_AFTER + profile_steps instead."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = load_train(data_dir)
    model = make_net()
    if arm == "torch-cl":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    warmup = max(1, steps // 20)

    def lr_lambda(step):  # linear warmup, then cosine to 0 (the demo's)
        if step < warmup:
            return step / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    bf16 = precision == "bf16"
    accelerator = None
    if arm == "accelerate":
        from accelerate import Accelerator
        accelerator = Accelerator(cpu=True, mixed_precision="bf16" if bf16 else "no")
        model, opt, sched = accelerator.prepare(model, opt, sched)
    model.train()
    perm = torch.randperm(x.size(0))
    profiler = None
    start = time.perf_counter()
    for step in range(steps):
        if profile_steps and step == PROFILE_AFTER:
            profiler = torch.autograd.profiler.profile()
            profiler.__enter__()
        idx = perm[step * BATCH:(step + 1) * BATCH]
        xb, yb = x[idx], y[idx]
        if accelerator is not None:
            with accelerator.autocast():
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
        if profiler is not None and step + 1 == PROFILE_AFTER + profile_steps:
            profiler.__exit__(None, None, None)
            return {"steps": profile_steps, "ops": [
                {"name": e.key, "calls": e.count / profile_steps,
                 "self_us": e.self_cpu_time_total / profile_steps,
                 "total_us": e.cpu_time_total / profile_steps}
                for e in profiler.key_averages()]}
    seconds = time.perf_counter() - start
    return steps * BATCH / seconds


def ampkit_arm(binary, precision, steps, threads):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [binary, "--max-steps", str(steps), "--epochs", "1",
             "--threads", str(threads), "--limit-test", "1000",
             "--mixed-precision", precision, "--output-dir", out],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f)["samples_per_second"]


def profile(args):
    """Both sides' per-step operator tables, merged by operator name."""
    steps = PROFILE_AFTER + args.profile_steps
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [args.ampkit, "--max-steps", str(steps), "--epochs", "1",
             "--threads", str(args.threads), "--limit-test", "1000",
             "--mixed-precision", args.profile, "--output-dir", out,
             "--profile-steps", str(args.profile_steps)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        with open(os.path.join(out, "profile.json")) as f:
            ours = json.load(f)
    theirs = json.loads(subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", "torch",
         "--precision", args.profile, "--steps", str(steps),
         "--threads", str(args.threads), "--data-dir", args.data_dir,
         "--worker-profile-steps", str(args.profile_steps)],
        check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    rows = {}
    for side, table in (("ampkit", ours), ("torch", theirs)):
        for op in table["ops"]:
            rows.setdefault(op["name"], {})[side] = op
    print(f"demo CNN, {args.profile}, steps {PROFILE_AFTER + 1}-{steps}, "
          f"{args.threads} threads: per step, self CPU microseconds and calls")
    print(f"{'operator':44} {'ampkit us':>10} {'calls':>6} {'torch us':>10} {'calls':>6}")
    def cell(op):
        return (f"{op['self_us']:10.0f} {op['calls']:6.1f}" if op
                else f"{'-':>10} {'-':>6}")
    order = sorted(rows.items(), key=lambda kv: -max(
        v["self_us"] for v in kv[1].values()))
    for name, sides in order[:args.profile_rows]:
        print(f"{name[:44]:44} {cell(sides.get('ampkit'))} {cell(sides.get('torch'))}")
    for side, table in (("ampkit", ours), ("torch", theirs)):
        total = sum(op["self_us"] for op in table["ops"])
        print(f"{side}: {total / 1000:.2f} ms of operator time per step, "
              f"{len(table['ops'])} distinct operators")


def run_python(python, arm, precision, args):
    out = subprocess.run(
        [python, os.path.abspath(__file__), "--worker", arm,
         "--precision", precision, "--steps", str(args.steps),
         "--threads", str(args.threads), "--data-dir", args.data_dir],
        check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    home = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ampkit", default="build/examples/fashion_mnist/fashion_mnist")
    p.add_argument("--accelerate-python",
                   default=os.path.join(home, "ampkit/peer-1.13/bin/python"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--precisions", default="no,bf16",
                   help="comma-separated, of no and bf16: which to time (bf16 runs "
                        "15-20x slower than fp32 on a CPU without native bf16)")
    p.add_argument("--data-dir", default=DATA)
    p.add_argument("--worker", choices=["torch", "torch-cl", "accelerate"],
                   help=argparse.SUPPRESS)
    p.add_argument("--precision", default="no", help=argparse.SUPPRESS)
    p.add_argument("--profile", choices=["no", "bf16"],
                   help="compare per-operator profiles in this precision instead of timing")
    p.add_argument("--profile-steps", type=int, default=20)
    p.add_argument("--profile-rows", type=int, default=25)
    p.add_argument("--worker-profile-steps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps * BATCH > 60000:
        sys.exit("cnn_peer.py: --steps must be at most 937 (one epoch of 60000 at batch 64)")
    if args.worker:
        result = python_arm(args.worker, args.precision, args.steps, args.threads,
                            args.data_dir, args.worker_profile_steps)
        print(json.dumps(result) if isinstance(result, dict) else result)
        return
    if not os.access(args.ampkit, os.X_OK):
        sys.exit(f"cnn_peer.py: no demo at {args.ampkit}; build it (cmake --build build) "
                 "or pass --ampkit")
    if args.profile:
        if args.profile_steps < 1 or (PROFILE_AFTER + args.profile_steps) * BATCH > 60000:
            sys.exit(f"cnn_peer.py: --profile-steps must be 1 to {60000 // BATCH - PROFILE_AFTER}")
        profile(args)
        return
    precisions = args.precisions.split(",")
    if not precisions or any(pr not in ("no", "bf16") for pr in precisions):
        sys.exit(f"cnn_peer.py: --precisions {args.precisions!r}: give no, bf16 or no,bf16")
    arms = {"ampkit": None, "torch": sys.executable}
    if os.access(args.accelerate_python, os.X_OK):
        arms["accelerate"] = args.accelerate_python
    else:
        print(f"cnn_peer.py: no accelerate at {args.accelerate_python}; see this "
              "script's docstring to install it. Running without it.", file=sys.stderr)
    arms["torch-cl"] = sys.executable
    results = {(a, pr): [] for a in arms for pr in precisions}
    for r in range(args.rounds):
        for precision in precisions:
            for arm, python in arms.items():
                if arm == "ampkit":
                    v = ampkit_arm(args.ampkit, precision, args.steps, args.threads)
                else:
                    v = run_python(python, arm, precision, args)
                results[(arm, precision)].append(v)
                print(f"round {r + 1} {precision:4} {arm:10} {v:8.0f} samples/s",
                      file=sys.stderr)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"demo CNN, batch {BATCH}, {args.steps} steps, {args.threads} threads, "
          f"median of {args.rounds} (samples/s)")
    peers = [a for a in arms if a != "ampkit"]
    print(f"| | {' | '.join(arms)} | "
          + " | ".join(f"ampkit / {a}" for a in peers) + " |")
    print("|---" * (len(arms) + len(peers) + 1) + "|")
    for precision in precisions:
        name = "fp32" if precision == "no" else precision
        cells = [f"{med[(a, precision)]:.0f}" for a in arms]
        ratios = [f"{med[('ampkit', precision)] / med[(a, precision)]:.2f}x" for a in peers]
        print(f"| {name} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    if len(precisions) == 2:
        print(f"ampkit bf16 / fp32: {med[('ampkit', 'bf16')] / med[('ampkit', 'no')]:.2f}x")


if __name__ == "__main__":
    main()
