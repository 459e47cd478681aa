#!/usr/bin/env python3
"""The Python peer of examples/gpt for the GPU benchmark: the same GPT-2
architecture, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), warmup +
cosine schedule, data windows and loop, trained through Hugging Face
accelerate when it is installed, else torch.autocast + torch.amp.GradScaler
(the result says which). Both sides run eager (no torch.compile) and use
scaled_dot_product_attention. Prints one JSON line:
tokens_per_second over the steps after --untimed-steps.

  python3 bench/gpt_peer.py --data-file kjv.txt --mixed-precision bf16 \
      --batch-size 16 --max-steps 25 --untimed-steps 5
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, 2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"])
        for name, p in self.named_parameters():
            if "ln_" in name:
                continue
            if p.dim() == 1:
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


CONFIGS = {
    "tiny": dict(block_size=64, n_layer=2, n_head=2, n_embd=64),
    "small": dict(block_size=128, n_layer=4, n_head=4, n_embd=128),
    "gpt2": dict(block_size=1024, n_layer=12, n_head=12, n_embd=768),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-file", required=True)
    ap.add_argument("--config", default="gpt2", choices=CONFIGS)
    ap.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=25)
    ap.add_argument("--untimed-steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--no-accelerate", action="store_true")
    ap.add_argument("--tf32", default="default", choices=["on", "off", "default"],
                    help="fp32 matmuls and convolutions on TF32 tensor cores (as examples/gpt --tf32)")
    args = ap.parse_args()
    if args.tf32 != "default":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"

    text = open(args.data_file, "rb").read()
    alphabet = sorted(set(text))
    table = torch.zeros(256, dtype=torch.long)
    table[torch.tensor(alphabet)] = torch.arange(len(alphabet))
    ids = table[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    train = ids[: len(ids) * 9 // 10]
    c = dict(CONFIGS[args.config])
    c["vocab_size"] = max(len(alphabet), 50304) if args.config == "gpt2" else len(alphabet)
    T = c["block_size"]
    n = (len(train) - 1) // T
    data = train[: n * T].view(n, T)
    target = train[1: n * T + 1].view(n, T)
    dataset = torch.utils.data.TensorDataset(data, target)

    torch.manual_seed(42)
    model = Gpt(c)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    total = args.max_steps
    warmup = max(1, total // 20)

    def lr_lambda(step):
        if step < warmup:
            return step / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))

    use_accelerate = not args.no_accelerate
    try:
        if use_accelerate:
            import accelerate  # noqa: F401
    except ImportError:
        use_accelerate = False
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    if use_accelerate:
        from accelerate import Accelerator
        import accelerate
        accelerator = Accelerator(mixed_precision=args.mixed_precision)
        device = accelerator.device
        model = model.to(device)
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
        model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
        runner = "accelerate " + accelerate.__version__
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = model.to(device)
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
        runner = "torch.autocast (accelerate not installed)"
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(args.mixed_precision)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    steps, tokens, start = 0, 0, time.perf_counter()
    while steps < args.max_steps:
        for x, y in loader:
            if use_accelerate:
                with accelerator.accumulate(model):
                    loss = model(x, y)
                    accelerator.backward(loss)
                    opt.step()
                    sched.step()
                    opt.zero_grad()
            else:
                x, y = x.to(device), y.to(device)
                with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                sched.step()
                opt.zero_grad(set_to_none=True)
            steps += 1
            tokens += x.numel()
            if steps == args.untimed_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start, tokens = time.perf_counter(), 0
            if steps == args.max_steps:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "runner": runner,
        "torch": torch.__version__,
        "precision": args.mixed_precision,
        "batch_size": args.batch_size,
        "seq_len": T,
        "parameters": sum(p.numel() for p in model.parameters()),
        "timed_steps": args.max_steps - args.untimed_steps,
        "tokens_per_second": tokens / seconds,
        "final_loss": loss.item(),
    }))


if __name__ == "__main__":
    main()
