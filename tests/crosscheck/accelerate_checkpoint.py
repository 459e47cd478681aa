# The Python side of accelerate_checkpoint.sh: accelerate trains the
# by_feature examples' MLP (784 -> 128 -> 10, their `Net`) for 20 steps and saves its state (save_state), then goes on for 20 more
# and writes the final weights; `compare` checks ampkit's continuation of
# the saved folder against them. The data of step k is a formula of k, so
# both languages compute the same batches.
#   accelerate_checkpoint.py save DIR REFERENCE.safetensors
#   accelerate_checkpoint.py load DIR OUT.safetensors   (ampkit's folder:
#     load_state, its torch random state checked, steps 20..39)
#   accelerate_checkpoint.py compare REFERENCE.safetensors OTHER.safetensors
import sys

import torch
from accelerate import Accelerator
from safetensors.torch import load_file, save_file

WARMUP, TOTAL = 5, 40


def batch(step):
    i = torch.arange(8 * 784, dtype=torch.float32) + 8 * 784 * step
    labels = torch.remainder(torch.arange(8) * 3 + step, 10)
    return torch.sin(0.001 * i).reshape(8, 784), labels


class Net(torch.nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.fc1 = torch.nn.Linear(28 * 28, hidden)
        self.fc2 = torch.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def linear_with_warmup(step):  # transformers' get_linear_schedule_with_warmup
    if step < WARMUP:
        return step / max(1, WARMUP)
    return max(0.0, (TOTAL - step) / max(1, TOTAL - WARMUP))


def train(folder, out, mode):
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    net = Net()
    adamw = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(adamw, linear_with_warmup)
    model, optimizer, scheduler = accelerator.prepare(net, adamw, schedule)
    first = 0
    if mode == "load":
        accelerator.load_state(folder)
        saved = torch.load(f"{folder}/random_states_0.pkl")["torch_manual_seed"]
        if not torch.equal(torch.get_rng_state(), saved):
            sys.exit("accelerate's load_state did not set torch's random state "
                     "(it skips the rest when Python's or NumPy's state fails)")
        if scheduler.scheduler.last_epoch != 20:
            sys.exit(f"the scheduler resumed at {scheduler.scheduler.last_epoch}, not 20")
        first = 20
    for step in range(first, 2 * 20):
        if mode == "save" and step == 20:
            accelerator.save_state(folder)
        x, y = batch(step)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)


def compare(reference, ours):
    a, b = load_file(reference), load_file(ours)
    if sorted(a) != sorted(b):
        sys.exit(f"other tensors: {sorted(a)} against {sorted(b)}")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    print(f"largest difference after 20 + 20 steps: {worst:.3g}")
    if worst > 1e-5:
        sys.exit("ampkit's continuation differs from accelerate's by more than 1e-5")


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        compare(*sys.argv[2:])
    else:
        train(*sys.argv[2:], sys.argv[1])
