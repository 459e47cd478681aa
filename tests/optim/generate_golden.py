#!/usr/bin/env python3
"""Writes the golden lr sequences the optim/ tests compare against.

Run with Debian's python3 and python3-torch (1.13):
    /usr/bin/python3 tests/optim/generate_golden.py
It rewrites tests/optim/golden_schedules.h; with --check it writes it to a
temporary folder and exits 1 if the checked-in file differs in anything but
the line naming the torch version (a CTest test runs that, with 1.13 and
with 2.11: their schedules agree to the last digit), 77 if torch cannot be
imported.

Every schedule runs on torch.optim.SGD with two param groups (BASE_LRS) and
records both groups' lrs after construction and after each step:
1. Warmup schedules: transformers' get_{constant,linear,cosine}_schedule_with_
   warmup are LambdaLR with the lambdas of transformers/optimization.py.
   transformers is not a Debian package, so the lambdas are written out below
   (formulas as in transformers 4.x); when transformers is importable they are
   checked against it.
2. StepLR: torch.optim.lr_scheduler.StepLR itself (its chainable form).
3. ReduceLROnPlateau: torch's own, fed a scripted metric sequence.
"""
import math
import os
import sys
import tempfile
import warnings

try:
    import torch
    from torch.optim.lr_scheduler import LambdaLR, ReduceLROnPlateau, StepLR
except ImportError:
    print("generate_golden.py: needs Python torch (Debian: apt-get install python3-torch)")
    sys.exit(77)  # CTest's skip code for the up-to-date check

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(HERE))
from golden_common import body, skip_unless_torch  # noqa: E402
BASE_LRS = [0.1, 0.0375]
NUM_STEPS = 30      # step() calls per warmup and StepLR schedule
NUM_METRICS = 40    # step(metric) calls per ReduceLROnPlateau run


def make_optimizer():
    params = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    return torch.optim.SGD(
        [{"params": [p], "lr": lr} for p, lr in zip(params, BASE_LRS)], lr=BASE_LRS[0])


def group_lrs(optimizer):
    return [g["lr"] for g in optimizer.param_groups]


# ------------------------------------------------- 1. transformers' lambdas
def constant_lambda(num_warmup_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1.0, num_warmup_steps))
        return 1.0
    return lr_lambda


def linear_lambda(num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step)
                   / float(max(1, num_training_steps - num_warmup_steps)))
    return lr_lambda


def cosine_lambda(num_warmup_steps, num_training_steps, num_cycles):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = (float(current_step - num_warmup_steps)
                    / float(max(1, num_training_steps - num_warmup_steps)))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return lr_lambda


# name, LRScheduler::name(), num_warmup_steps, num_training_steps, num_cycles
WARMUP_CASES = [
    ("constant_warmup_5", "constant_with_warmup", 5, 0, 0.0),
    ("constant_no_warmup", "constant_with_warmup", 0, 0, 0.0),
    # Runs past num_training_steps, where the lr stays 0.
    ("linear_warmup_5_of_25", "linear_with_warmup", 5, 25, 0.0),
    ("linear_no_warmup_of_30", "linear_with_warmup", 0, 30, 0.0),
    # num_training_steps == num_warmup_steps: the max(1, ...) guard.
    ("linear_warmup_is_all_10", "linear_with_warmup", 10, 10, 0.0),
    # Past num_training_steps the half cosine rises again, as in transformers.
    ("cosine_warmup_5_of_25", "cosine_with_warmup", 5, 25, 0.5),
    ("cosine_two_cycles_warmup_3_of_27", "cosine_with_warmup", 3, 27, 2.0),
    ("cosine_no_warmup_of_7_one_and_a_half_cycles", "cosine_with_warmup", 0, 7, 1.5),
]


def make_lambda(kind, warmup, total, cycles):
    if kind == "constant_with_warmup":
        return constant_lambda(warmup)
    if kind == "linear_with_warmup":
        return linear_lambda(warmup, total)
    return cosine_lambda(warmup, total, cycles)


def check_against_transformers():
    try:
        import transformers
    except ImportError:
        return
    for _, kind, warmup, total, cycles in WARMUP_CASES:
        opt = make_optimizer()
        if kind == "constant_with_warmup":
            theirs = transformers.get_constant_schedule_with_warmup(opt, warmup)
        elif kind == "linear_with_warmup":
            theirs = transformers.get_linear_schedule_with_warmup(opt, warmup, total)
        else:
            theirs = transformers.get_cosine_schedule_with_warmup(opt, warmup, total, cycles)
        ours = make_lambda(kind, warmup, total, cycles)
        for step in range(NUM_STEPS + 1):
            assert theirs.lr_lambdas[0](step) == ours(step), (kind, step)


def run_steps(opt, scheduler):
    lrs = [group_lrs(opt)]
    for _ in range(NUM_STEPS):
        opt.step()  # no gradients: only keeps PyTorch's order check quiet
        scheduler.step()
        lrs.append(group_lrs(opt))
    return lrs


def warmup_schedule(case):
    name, kind, warmup, total, cycles = case
    opt = make_optimizer()
    return dict(name=name, kind=kind, warmup=warmup, total=total, cycles=cycles,
                lrs=run_steps(opt, LambdaLR(opt, make_lambda(kind, warmup, total, cycles))))


# ---------------------------------------------------------------- 2. StepLR
# name, step_size, gamma; non-powers of two make the chained rounding visible.
STEP_CASES = [
    ("step_7_gamma_0.1", 7, 0.1),
    ("step_3_gamma_0.3", 3, 0.3),
    ("step_1_gamma_0.9", 1, 0.9),
    ("step_4_gamma_1.7", 4, 1.7),
]


def step_schedule(case):
    name, step_size, gamma = case
    opt = make_optimizer()
    return dict(name=name, step_size=step_size, gamma=gamma,
                lrs=run_steps(opt, StepLR(opt, step_size, gamma)))


# ----------------------------------------------------- 3. ReduceLROnPlateau
def lcg_noise(n, seed):
    """n reproducible values in [-0.5, 0.5), multiples of 1/1000."""
    state, out = seed, []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append(((state >> 33) % 1000) / 1000.0 - 0.5)
    return out


def loss_curve(n, seed):
    """Falls quickly, then plateaus with noise, with exact repeats of a best
    value and a late drop."""
    noise = lcg_noise(n, seed)
    out = []
    for i in range(n):
        if i < 8:
            v = 1.0 + 2.0 * 0.6 ** i
        elif i < 28:
            v = 1.05 + 0.02 * noise[i]
        else:
            v = 0.9 + 0.004 * noise[i]
        out.append(round(v, 6))
    out[12] = out[11] = min(out[8:11])  # equal to the best: not better
    return out


LOSS = loss_curve(NUM_METRICS, 3)
ACCURACY = [round(1.0 - v / 4.0, 6) for v in loss_curve(NUM_METRICS, 5)]

# name, metrics, options (torch's keyword arguments, default where absent)
PLATEAU_CASES = [
    ("min_rel_patience_2", LOSS, dict(mode="min", factor=0.5, patience=2)),
    ("min_abs_cooldown_2_min_lr", LOSS,
     dict(mode="min", threshold_mode="abs", threshold=0.01, patience=1,
          cooldown=2, factor=0.5, min_lr=0.01)),
    ("max_rel_cooldown_1", ACCURACY,
     dict(mode="max", factor=0.3, patience=3, cooldown=1, threshold=0.001)),
    # patience 0 reduces often; eps 1e-3 stops the small group first.
    ("max_abs_eps", ACCURACY,
     dict(mode="max", threshold_mode="abs", threshold=0.002, patience=0,
          cooldown=3, factor=0.5, eps=1e-3)),
    ("min_defaults", LOSS, dict()),
]
PLATEAU_DEFAULTS = dict(mode="min", factor=0.1, patience=10, threshold=1e-4,
                        threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8)


def plateau_schedule(case):
    name, metrics, options = case
    o = dict(PLATEAU_DEFAULTS, **options)
    opt = make_optimizer()
    scheduler = ReduceLROnPlateau(opt, **o)
    lrs = []
    for m in metrics:
        opt.step()
        scheduler.step(m)
        lrs.append(group_lrs(opt))
    return dict(name=name, options=o, metrics=metrics, lrs=lrs)


# ---------------------------------------------------------------- header
def c_double(x):
    return float(x).hex()


def c_array(lines, name, values, per_line=4):
    lines.append("inline const double %s[] = {" % name)
    for i in range(0, len(values), per_line):
        lines.append("  " + ", ".join(c_double(v) for v in values[i:i + per_line]) + ",")
    lines.append("};")


def flat(lrs):
    return [lr for row in lrs for lr in row]


def write_header(path):
    warmups = [warmup_schedule(c) for c in WARMUP_CASES]
    steps = [step_schedule(c) for c in STEP_CASES]
    plateaus = [plateau_schedule(c) for c in PLATEAU_CASES]
    lines = [
        "// Generated by tests/optim/generate_golden.py with Python torch "
        + torch.__version__ + "; do not edit.",
        "// lr sequences of PyTorch's schedulers on two param groups: lr[2 * i + g]",
        "// is group g's lr after construction (i = 0) and i step() calls.",
        "#pragma once",
        "#include <cstdint>",
        "",
        "namespace golden {",
        "inline const double kBaseLrs[] = {%s};" % ", ".join(c_double(v) for v in BASE_LRS),
        "struct WarmupSchedule {",
        "  const char* name;",
        "  const char* scheduler;  // LRScheduler::name()",
        "  int64_t num_warmup_steps, num_training_steps;",
        "  double num_cycles;",
        "  int n;  // lrs per group",
        "  const double* lr;",
        "};",
        "struct StepSchedule {",
        "  const char* name;",
        "  int64_t step_size;",
        "  double gamma;",
        "  int n;",
        "  const double* lr;",
        "};",
        "// Here lr[2 * i + g] is group g's lr after step(metric[i]).",
        "struct PlateauSchedule {",
        "  const char* name;",
        "  const char* mode;",
        "  double factor;",
        "  int64_t patience;",
        "  double threshold;",
        "  const char* threshold_mode;",
        "  int64_t cooldown;",
        "  double min_lr, eps;",
        "  int n;",
        "  const double* metric;",
        "  const double* lr;",
        "};",
    ]
    for s in warmups + steps:
        c_array(lines, "k%s_lr" % ident(s["name"]), flat(s["lrs"]))
    for s in plateaus:
        c_array(lines, "k%s_metric" % ident(s["name"]), s["metrics"])
        c_array(lines, "k%s_lr" % ident(s["name"]), flat(s["lrs"]))
    lines.append("inline const WarmupSchedule kWarmupSchedules[] = {")
    for s in warmups:
        lines.append('  {"%s", "%s", %d, %d, %s, %d, k%s_lr},' % (
            s["name"], s["kind"], s["warmup"], s["total"], c_double(s["cycles"]),
            len(s["lrs"]), ident(s["name"])))
    lines.append("};")
    lines.append("inline const StepSchedule kStepSchedules[] = {")
    for s in steps:
        lines.append('  {"%s", %d, %s, %d, k%s_lr},' % (
            s["name"], s["step_size"], c_double(s["gamma"]), len(s["lrs"]), ident(s["name"])))
    lines.append("};")
    lines.append("inline const PlateauSchedule kPlateauSchedules[] = {")
    for s in plateaus:
        o = s["options"]
        lines.append('  {"%s", "%s", %s, %d, %s, "%s", %d, %s, %s, %d, k%s_metric, k%s_lr},' % (
            s["name"], o["mode"], c_double(o["factor"]), o["patience"], c_double(o["threshold"]),
            o["threshold_mode"], o["cooldown"], c_double(o["min_lr"]), c_double(o["eps"]),
            len(s["lrs"]), ident(s["name"]), ident(s["name"])))
    lines.append("};")
    lines.append("} // namespace golden")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def ident(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def main():
    # A PyTorch warning (say, about the order of the step() calls) would mean
    # the golden values come from a misuse.
    warnings.simplefilter("error", UserWarning)
    check_against_transformers()
    check = "--check" in sys.argv[1:]
    if check:
        skip_unless_torch(torch)
    out = tempfile.mkdtemp() if check else HERE
    name = "golden_schedules.h"
    write_header(os.path.join(out, name))
    if not check:
        return 0
    if body(os.path.join(out, name)) != body(os.path.join(HERE, name)):
        print("tests/optim/%s differs from what Python torch %s gives; rerun "
              "tests/optim/generate_golden.py with that Python (%s)"
              % (name, torch.__version__, sys.executable))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
