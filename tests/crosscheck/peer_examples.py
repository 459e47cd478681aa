"""Python peers of two ampkit by_feature twins, on the real accelerate API.

Ports accelerate's examples/by_feature/gradient_accumulation.py and
multi_process_metrics.py to the data and sizes the C++ twins use under
TESTING_MOCKED_DATALOADERS=1 (Fashion-MNIST: the first 2048 training and
500 test images, 2 epochs, batch 16 per process, eval batch 32, a 784-128-10
MLP, AdamW and a linear warmup schedule) and prints the same count lines the
twins print, so that compare_examples.sh can compare them:

  gradient_accumulation: "optimizer steps: A scheduler steps: B"
  multi_process_metrics: "gathered samples: X of Y" (once per epoch)

Usage:
  peer_examples.py [--nproc P] gradient_accumulation --gradient_accumulation_steps N
  peer_examples.py [--nproc P] multi_process_metrics

With --nproc P > 1 the script starts P copies of itself as the ranks of a
MULTI_CPU (gloo) run, setting the variables torchrun would set (torchrun is
broken on this Debian python). Accelerator(cpu=True) with LOCAL_RANK set takes
accelerate's MULTI_CPU path with gloo (state.py, PartialState._prepare_backend).
"""

import argparse
import gzip
import math
import os
import socket
import subprocess
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed

# ampkit::data::kFashionMnistDir (include/ampkit/data/idx.h).
FASHION_MNIST_DIR = os.environ.get(
    "AMPKIT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"
)
EVAL_BATCH_SIZE = 32
MAX_GPU_BATCH_SIZE = 16
CONFIG = {"lr": 1e-3, "num_epochs": 2, "seed": 42, "batch_size": 16}


def read_idx(name, limit):
    """The first `limit` items of an IDX (gzip) file as a numpy array."""
    with gzip.open(os.path.join(FASHION_MNIST_DIR, name), "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    return array[:limit]


def dataset(train):
    """TensorDataset of (float images [N, 1, 28, 28], long labels)."""
    prefix, limit = ("train", 2048) if train else ("t10k", 500)
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz", limit)
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz", limit)
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 255.0
    return TensorDataset(x, torch.tensor(labels, dtype=torch.long))


def get_dataloaders(batch_size):
    train = DataLoader(dataset(True), shuffle=True, batch_size=batch_size)
    evals = DataLoader(dataset(False), shuffle=False, batch_size=EVAL_BATCH_SIZE)
    return train, evals


def make_model():
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(28 * 28, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    """transformers.get_linear_schedule_with_warmup, without transformers."""

    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return max(
            0.0,
            float(num_training_steps - step)
            / float(max(1, num_training_steps - num_warmup_steps)),
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def adam_steps(optimizer):
    """Optimizer steps actually taken: AdamW's per-parameter 'step' count."""
    state = optimizer.optimizer.state
    return max((int(s["step"]) for s in state.values()), default=0)


def finish(accelerator):
    """accelerator.end_training(), then, in a spawned rank, exit at once:
    with torch 1.13, freeing the DDP model's Reducer runs ProcessGroupGloo's
    destructor, which joins a gloo thread waiting for the GIL the freeing
    thread holds (a hang). The work is done; leave without destructors."""
    accelerator.end_training()
    if "RANK" in os.environ:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def gradient_accumulation(args):
    """examples/by_feature/gradient_accumulation.py's training loop."""
    accelerator = Accelerator(
        cpu=True, gradient_accumulation_steps=args.gradient_accumulation_steps
    )
    num_epochs, batch_size = CONFIG["num_epochs"], CONFIG["batch_size"]
    set_seed(CONFIG["seed"])
    train_dataloader, eval_dataloader = get_dataloaders(batch_size)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG["lr"])
    lr_scheduler = linear_schedule_with_warmup(
        optimizer, 100, math.ceil(2048 / batch_size) * num_epochs
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = (
        accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
        )
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(num_epochs):
        model.train()
        for x, y in train_dataloader:
            with accelerator.accumulate(model):
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
    accelerator.print(
        "optimizer steps:",
        adam_steps(optimizer),
        "scheduler steps:",
        lr_scheduler.scheduler.last_epoch,
    )
    finish(accelerator)


def multi_process_metrics(args):
    """examples/by_feature/multi_process_metrics.py's loops, counting the
    samples its manual truncation of the gathered last batch keeps."""
    accelerator = Accelerator(cpu=True)
    num_epochs, batch_size = CONFIG["num_epochs"], CONFIG["batch_size"]
    gradient_accumulation_steps = 1
    if batch_size > MAX_GPU_BATCH_SIZE:
        gradient_accumulation_steps = batch_size // MAX_GPU_BATCH_SIZE
        batch_size = MAX_GPU_BATCH_SIZE
    set_seed(CONFIG["seed"])
    train_dataloader, eval_dataloader = get_dataloaders(batch_size)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CONFIG["lr"])
    lr_scheduler = linear_schedule_with_warmup(
        optimizer,
        100,
        (len(train_dataloader) * num_epochs) // gradient_accumulation_steps,
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = (
        accelerator.prepare(
            model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
        )
    )
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(num_epochs):
        model.train()
        for step, (x, y) in enumerate(train_dataloader):
            loss = loss_fn(model(x), y) / gradient_accumulation_steps
            accelerator.backward(loss)
            if step % gradient_accumulation_steps == 0:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
        model.eval()
        samples_seen = 0
        gathered = 0  # stands in for metric.add_batch's accumulated references
        for step, (x, y) in enumerate(eval_dataloader):
            with torch.no_grad():
                logits = model(x)
            predictions = logits.argmax(dim=-1)
            predictions, references = accelerator.gather((predictions, y))
            # The original's truncation, verbatim.
            if accelerator.use_distributed:
                if step == len(eval_dataloader) - 1:
                    predictions = predictions[: len(eval_dataloader.dataset) - samples_seen]
                    references = references[: len(eval_dataloader.dataset) - samples_seen]
                else:
                    samples_seen += references.shape[0]
            gathered += references.shape[0]
        accelerator.print(
            "gathered samples:", gathered, "of", len(eval_dataloader.dataset)
        )
    finish(accelerator)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(nproc, argv):
    """Runs this script as `nproc` ranks on this machine; their exit code."""
    port = str(free_port())
    children = []
    for rank in range(nproc):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        env.setdefault("OMP_NUM_THREADS", "1")
        # accelerate 1.2.1's PartialState.set_device calls
        # torch.cpu.device_count(), which torch 1.13 lacks; a device given
        # here makes it return before that call.
        env.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
        children.append(
            subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env)
        )
    codes = [c.wait() for c in children]
    return next((c for c in codes if c != 0), 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=1)
    sub = parser.add_subparsers(dest="example", required=True)
    ga = sub.add_parser("gradient_accumulation")
    ga.add_argument("--gradient_accumulation_steps", type=int, default=1)
    sub.add_parser("multi_process_metrics")
    args = parser.parse_args()
    if args.nproc > 1 and "RANK" not in os.environ:
        argv = sys.argv[1:]
        # Drop --nproc P (or --nproc=P) for the children.
        i = next(i for i, a in enumerate(argv) if a.startswith("--nproc"))
        del argv[i : i + (1 if "=" in argv[i] else 2)]
        sys.exit(spawn(args.nproc, argv))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    {"gradient_accumulation": gradient_accumulation,
     "multi_process_metrics": multi_process_metrics}[args.example](args)


if __name__ == "__main__":
    main()
