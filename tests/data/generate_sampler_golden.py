#!/usr/bin/env python3
"""Golden epoch orders for ShardedSampler: torch.utils.data.DistributedSampler's
shuffle, torch.randperm(n) with a generator seeded seed + epoch. Run with
Debian's /usr/bin/python3 (python3-torch 1.13.1) and paste the printed lines
into sharded_sampler_test.cpp."""
import torch


def order(n, seed, epoch):
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n, generator=g).tolist()


def cpp(name, values):
    return f"const std::vector<size_t> {name}{{{', '.join(map(str, values))}}};"


print(f"// torch {torch.__version__}: randperm(10) seeded 5 + epoch.")
print(cpp("kGoldenSeed5Epoch0", order(10, 5, 0)))
print(cpp("kGoldenSeed5Epoch1", order(10, 5, 1)))
print("// randperm(25) seeded 1234567890123 + 2 (epoch 2).")
print(cpp("kGoldenLargeSeedEpoch2", order(25, 1234567890123, 2)))
