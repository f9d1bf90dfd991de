"""A small decoder-only transformer trained on a synthetic next-token task, on the CPU.

The data is a fixed random permutation applied token by token (each token predicts the next one
through the permutation), so the loss falls quickly from log(vocab) towards 0. Used by the
neuron-profile tests and as the capture example:

    neuron-profile capture -s train.nsprof -- python examples/train_transformer.py --steps 6
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        self.layers = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def batches(vocab: int, batch: int, seq: int, gen: torch.Generator, perm: torch.Tensor):
    while True:
        start = torch.randint(0, vocab, (batch, 1), generator=gen)
        rows = [start]
        for _ in range(seq):
            rows.append(perm[rows[-1]])
        data = torch.cat(rows, dim=1)
        yield data[:, :-1], data[:, 1:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=0, help="raise at this step (tests)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    perm = torch.randperm(args.vocab, generator=gen)
    model = TinyGPT(args.vocab, args.dim, args.heads, args.layers, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    data = batches(args.vocab, args.batch, args.seq, gen, perm)
    losses = []
    for step in range(1, args.steps + 1):
        if step == args.fail_at:
            raise RuntimeError(f"failing at step {step} as asked")
        x, y = next(data)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        print(f"step {step} loss {losses[-1]:.4f}", flush=True)
    print(f"first_loss {losses[0]:.4f} last_loss {losses[-1]:.4f} log_vocab {math.log(args.vocab):.4f}")
    return 0 if losses[-1] < losses[0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
