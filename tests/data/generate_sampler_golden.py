#!/usr/bin/env python3
"""Golden epoch orders for ShardedSampler: torch.utils.data.DistributedSampler's
shuffle, torch.randperm(n) with a generator seeded seed + epoch. Run with
Debian's python3-torch; the printed lists are pasted into
sharded_sampler_test.cpp (kGoldenEpoch0/1)."""
import torch

for epoch in (0, 1):
    g = torch.Generator()
    g.manual_seed(5 + epoch)
    print(f"epoch {epoch}:", torch.randperm(10, generator=g).tolist())
