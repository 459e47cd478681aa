#!/usr/bin/env python3
"""Writes the torch.save seeds of bench/fuzz/checkpoint_fuzz.cpp into bench/fuzz/seeds/.

Real files of the running torch (Debian's 1.13, or the 2.11 venv's): the
state dicts accelerate's save_state writes (a model's, an optimizer's, a
scheduler's, a GradScaler's and random_states_0.pkl with NumPy's state).
Each gives two seeds: selector 2 and its data.pkl (the pickle machine
alone), selector 3 and the whole zip (load_torch_file).
Usage: python3 bench/fuzz/make_torch_seeds.py [OUT_DIR]
"""
import io
import os
import random
import sys
import zipfile

import numpy as np
import torch

PICKLE = b"\x02"
TORCH_FILE = b"\x03"


def states():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    random.seed(0)
    np.random.seed(0)
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                   "growth_interval": 2000, "_growth_tracker": 0},
        # As accelerate's save_accelerator_state, Python's state cut short to
        # keep the seed small (its shape is what matters).
        "random_states": {"random_state": (3, random.getstate()[1][:8], None),
                          "numpy_random_seed": np.random.get_state(),
                          "torch_manual_seed": torch.get_rng_state()[:16].clone()},
        "empty_and_bf16": {"none": torch.zeros(0, 3), "h": torch.ones(2, dtype=torch.bfloat16),
                           "view": torch.arange(6.0).reshape(2, 3).t()},
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
    os.makedirs(out, exist_ok=True)
    flavour = "torch" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    for name, value in states().items():
        buf = io.BytesIO()
        torch.save(value, buf)
        whole = buf.getvalue()
        with zipfile.ZipFile(io.BytesIO(whole)) as z:
            pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            pickle = z.read(pkl)
        for selector, data, kind in ((PICKLE, pickle, "pkl"), (TORCH_FILE, whole, "pt")):
            with open(os.path.join(out, f"{flavour}_{name}_{kind}"), "wb") as f:
                f.write(selector + data)


if __name__ == "__main__":
    main()
