"""How much simulation one program may ask for, checked before anything is lowered.

The chip model lowers every operator into per-tile instructions held in numpy arrays (about
100 bytes and 0.3 us of CPU each): a spec such as a 20M x 20M matmul would need terabytes. Such a
program is refused up front, naming the limit, instead of exhausting the machine. The estimate
counts what the lowering will build: TensorE tiles of matmuls (128 x 512 x 128) and of attention,
plus the SBUF blocking table of each matmul; vector and DMA operators are lowered as a handful of
vectorised stages whatever their size, so they do not count.

The limit, ``MAX_INSTRUCTIONS`` (2**25, about 3 GiB and 10 s), is an `assumption` about the
machine; override it with the environment variable ``NEURONSCOPE_MAX_INSTRUCTIONS``.
"""
from __future__ import annotations

import math
import os

from .errors import SpecError

MAX_INSTRUCTIONS = 1 << 25
MAX_NODES = 4096          # instances in one job (`--nodes`): beyond the largest clusters
ENV = "NEURONSCOPE_MAX_INSTRUCTIONS"
_TILE = 128        # stationary and contraction tile (PE array side)
_MOVING = 512      # moving tile (free size)


def limit() -> int:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return MAX_INSTRUCTIONS
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise SpecError(f"{ENV}={text!r}: expected a positive integer")
    return int(text)


def op_instructions(kind: str, get) -> int:
    """About how many instructions (and table entries) lowering one operator builds."""
    if kind == "matmul":
        m, k, n, batch = get("m"), get("k"), get("n"), get("batch")
        if get("weights"):
            m, batch = m * batch, 1
        stat, mov = math.ceil(min(m, n) / _TILE), math.ceil(max(m, n) / _MOVING)
        blocking = math.ceil(m / _TILE) * math.ceil(n / _TILE)
        return batch * stat * mov * math.ceil(k / _TILE) + blocking
    if kind == "attention":
        return (get("batch") * math.ceil(get("q_rows") / _TILE) * math.ceil(get("kv_len") / _TILE)
                * math.ceil(get("head_dim") / _TILE))
    return 1


def check_program(ops, what: str = "the program") -> None:
    """SpecError when lowering `ops` would need more than the limit."""
    total = program_instructions(ops)
    cap = limit()
    if total > cap:
        raise SpecError(f"{what} is too large to simulate: about {float(total):.3g} instructions, "
                        f"limit {cap} ({ENV} raises it)")


def program_instructions(ops) -> int:
    return sum(op_instructions(op.kind, op.get) for op in ops)
