"""A small data-parallel MLP trained with DistributedDataParallel over the gloo backend, on the CPU.

Each rank fits its own fixed batch of a shared random teacher (a linear map through a tanh), so the
loss of every rank falls from the first step. Launch it with torchrun; under neuron-profile every
worker is recorded and the ranks go into one profile:

    torchrun --nproc-per-node 2 examples/train_ddp.py --steps 3
    neuron-profile capture -s ddp.nsprof -- torchrun --nproc-per-node 2 examples/train_ddp.py --steps 3
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def mlp(dim: int, hidden: int, layers: int) -> nn.Sequential:
    blocks: list[nn.Module] = []
    width = dim
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), nn.GELU()]
        width = hidden
    blocks.append(nn.Linear(width, dim))
    return nn.Sequential(*blocks)


def fixed_batch(rank: int, batch: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's inputs and the teacher's targets (the teacher is the same on every rank)."""
    teacher = torch.randn(dim, dim, generator=torch.Generator().manual_seed(seed)) / dim ** 0.5
    x = torch.randn(batch, dim, generator=torch.Generator().manual_seed(seed + 1 + rank))
    return x, torch.tanh(x @ teacher)


def say(line: str) -> None:
    """One write per line: torchrun runs workers unbuffered (`python -u`), where print() writes
    the text and the newline separately and the workers' lines would interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=0, help="raise at this step (tests)")
    p.add_argument("--fail-rank", type=int, default=0, help="the rank that raises with --fail-at")
    args = p.parse_args(argv)
    dist.init_process_group("gloo")          # rank and world size from torchrun's environment
    rank = dist.get_rank()
    torch.manual_seed(args.seed)             # the same initial weights on every rank
    model = DistributedDataParallel(mlp(args.dim, args.hidden, args.layers))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    x, y = fixed_batch(rank, args.batch, args.dim, args.seed)
    losses = []
    try:
        for step in range(1, args.steps + 1):
            if step == args.fail_at and rank == args.fail_rank:
                raise RuntimeError(f"rank {rank} failing at step {step} as asked")
            loss = F.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()                  # DDP all-reduces the gradients here
            opt.step()
            losses.append(loss.item())
            say(f"rank {rank} step {step} loss {losses[-1]:.5f}")
    finally:
        dist.destroy_process_group()
    say(f"rank {rank} first_loss {losses[0]:.5f} last_loss {losses[-1]:.5f}")
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
