# ZeRO's and FSDP's traffic on Gloo with 2 processes, 25 MB (two 12.5 MB
# parts), medians of 3 rounds of 20, each figure beside its peers:
#  - the gradients' sum: an all-reduce (DDP's), Gloo's reduce_scatter
#    (torch 2.x only) and ampkit's point-to-point reduce-scatter (each
#    process sends the other its part and adds the part it receives);
#  - the shard broadcast after the step: the two parts broadcast one after
#    the other (what ampkit's ZeRO does), both issued at once, as Gloo's
#    all-gather, and as ampkit's point-to-point gather (FSDP's: each
#    process sends the other its part and receives the other's in place).
# Run with torch (Debian's 1.13 or the 2.11 venv), RANK 0 and 1:
#   for r in 0 1; do RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29711 \
#     /usr/bin/python3 bench/gloo_collectives.py & done; wait
import os, time, torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
rank = dist.get_rank()
n = 25 * 2**20 // 4
flat = torch.ones(n)
parts = [flat[: n // 2], flat[n // 2 :]]
def all_reduce():
    dist.all_reduce(flat)
def gloo_reduce_scatter():
    dist.reduce_scatter_tensor(torch.empty(n // 2), flat)
def exchange():
    received = torch.empty(n // 2)
    works = [dist.irecv(received, 1 - rank, tag=7),
             dist.isend(parts[1 - rank], 1 - rank, tag=7)]
    for w in works:
        w.wait()
    received.add_(parts[rank])
def broadcast_in_turn():
    for r in range(2):
        dist.broadcast(parts[r], r)
def broadcast_at_once():
    for w in [dist.broadcast(parts[r], r, async_op=True) for r in range(2)]:
        w.wait()
def all_gather():
    dist.all_gather([torch.empty(n // 2), torch.empty(n // 2)], parts[rank])
def exchange_gather():
    works = [dist.irecv(parts[1 - rank], 1 - rank, tag=8),
             dist.isend(parts[rank], 1 - rank, tag=8)]
    for w in works:
        w.wait()
runs = [all_reduce, exchange, broadcast_in_turn, broadcast_at_once, all_gather,
        exchange_gather]
if int(torch.__version__.split(".")[0]) >= 2:  # 1.13's Gloo has none
    runs.insert(1, gloo_reduce_scatter)
res = {}
for rnd in range(3):
    for f in runs:
        dist.barrier()
        t = time.perf_counter()
        for _ in range(20):
            f()
        res.setdefault(f.__name__, []).append((time.perf_counter() - t) / 20 * 1e3)
if rank == 0:
    print(f"torch {torch.__version__}, Gloo, 2 processes, 25 MB, ms (median of 3 x 20):")
    for name, v in res.items():
        print(f"  {name:<20}{sorted(v)[1]:8.1f}")
dist.destroy_process_group()
