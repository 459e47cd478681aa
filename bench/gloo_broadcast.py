# ZeRO's shard broadcast after the step, on Gloo with 2 processes: the two
# processes' 12.5 MB parts broadcast one after the other (what ampkit does),
# both issued at once, and as one all-gather; medians of 3 rounds of 20.
# Run with torch (Debian's 1.13 or the 2.11 venv), RANK 0 and 1:
#   for r in 0 1; do RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29711 \
#     /usr/bin/python3 bench/gloo_broadcast.py & done; wait
import os, sys, time, torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
n = 25 * 2**20 // 4
flat = torch.zeros(n)
parts = [flat[: n // 2], flat[n // 2 :]]
def seq():
    for r in range(2):
        dist.broadcast(parts[r], r)
def conc():
    ws = [dist.broadcast(parts[r], r, async_op=True) for r in range(2)]
    for w in ws:
        w.wait()
def ag():
    out = [torch.empty(n // 2), torch.empty(n // 2)]
    dist.all_gather(out, parts[dist.get_rank()])
res = {}
for rnd in range(3):
    for name, f in (("seq", seq), ("conc", conc), ("allgather", ag)):
        dist.barrier()
        t = time.perf_counter()
        for _ in range(20):
            f()
        res.setdefault(name, []).append((time.perf_counter() - t) / 20 * 1e3)
if dist.get_rank() == 0:
    print({k: sorted(v)[1] for k, v in res.items()}, "ms (median of 3 x 20)")
