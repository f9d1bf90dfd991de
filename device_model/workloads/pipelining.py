"""Collective pipelining in context encoding (`cc_tiles=N`).

The compiler can split the token-parallel ops around a tensor-parallel collective into N tiles
of tokens, so that one tile's all-reduce runs on the collective engines while the next tile
computes: neuronx-cc's collective pipelining, which NxD Inference sets with
`cc_pipeline_tiling_factor` (2 by default, 1 in its Llama tutorials), and which
transformers-neuronx's BSH attention layout allows ("better overlapping of compute with
collectives", its developer guide). The tiles do the same FLOPs and move the same activation
bytes, but each tile of a linear reads its weights again, each tile's collective pays a
collective's fixed costs, and a smaller collective may take another algorithm (the runtime's
switch points by size, C2: a 64 MiB all-reduce that runs as KangaRing runs as two RDH ones).

Attention cannot be tiled this way (every query attends to every tile's keys), so a tiled run
stops at it and the attention waits for all tiles. So does a linear whose tiles would hold
fewer than a full matmul tile of rows (TILE_ROWS tokens): the output head, which runs on each
sequence's last token, and every decode step. A run is tiled only if it holds a collective
and a linear.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import SpecError
from ..program import Op, Program

TILE_ROWS = 128      # N2: a matmul tile puts one token on each of the 128 partitions
# assumption: the most tiles one run splits into; NxD Inference's published configurations use
# 1 and 2, and thousands (a typo) would only make the estimate slow
MAX_TILES = 64
# the parameter of each tileable op that grows with the tokens it processes
_TOKEN_PARAM = {"matmul": "m", "binary": "elements", "activation": "elements",
                "cast": "elements", "layernorm": "rows", "rmsnorm": "rows",
                "collective": "bytes", "dma": "bytes"}


def _tileable(op: Op, tiles: int) -> bool:
    """Token-parallel ops that follow the op before them and split into `tiles` parts of at
    least one row (a linear: of at least TILE_ROWS): linears (not attention's
    activation-by-activation matmuls), elementwise ops, norms, collectives and stores."""
    if op.deps is not None or op.kind not in _TOKEN_PARAM:
        return False
    if op.get(_TOKEN_PARAM[op.kind]) < tiles:
        return False
    if op.kind == "matmul":
        return (bool(op.get("weights")) and op.get("batch") == 1
                and op.get("m") >= tiles * TILE_ROWS)
    if op.kind == "dma":
        return op.get("direction") == "store"
    return True


def _runs(ops: list[Op], tiles: int) -> list[tuple[int, int]]:
    """Maximal [start, end) spans of tileable ops; the program's first op starts none (it has
    no producer for the tiles to share)."""
    spans, start = [], None
    for i, op in enumerate(ops):
        if i > 0 and _tileable(op, tiles):
            start = i if start is None else start
            continue
        if start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(ops)))
    return spans


def _worth_tiling(ops: list[Op]) -> bool:
    """A run with a collective to hide and a linear's compute to hide it behind."""
    kinds = {op.kind for op in ops}
    return "collective" in kinds and "matmul" in kinds


def _share(total: int, tiles: int, t: int) -> int:
    """Tile t's part of `total` (the parts differ by at most one and add up to it)."""
    return total * (t + 1) // tiles - total * t // tiles


def _tile(op: Op, tiles: int, t: int) -> Op:
    key = _TOKEN_PARAM[op.kind]
    params = tuple((k, _share(v, tiles, t) if k == key else v) for k, v in op.params)
    return replace(op, name=f"{op.name}.tile{t}", params=params)


def is_tiled(program: Program) -> bool:
    """Whether `pipeline_tiles` split any run of `program`."""
    return any(op.name.endswith(".tile0") for op in program.ops)


def pipeline_tiles(program: Program, tiles: int) -> Program:
    """`program` with each run of token-parallel ops that holds a collective split into
    `tiles` chains, op by op (every tile of one op, then the next op's): a tile's op waits on
    the same tile's previous op, so the engines run tile t+1 while tile t's collective is in
    flight. The op after a run waits on every tile of the run's last op."""
    if tiles > MAX_TILES:
        raise SpecError(f"cc_tiles={tiles}: at most {MAX_TILES} tiles")
    if tiles <= 1:
        return program
    old = program.ops
    spans = {start: end for start, end in _runs(old, tiles) if _worth_tiling(old[start:end])}
    out: list[Op] = []
    where: dict[int, tuple[int, ...]] = {}     # an old op's index -> its new op(s)
    i = 0
    while i < len(old):
        end = spans.get(i)
        if end is None:
            op = old[i]
            if op.deps is not None:
                op = replace(op, deps=tuple(n for d in op.deps for n in where[d]))
            elif i > 0 and len(where[i - 1]) > 1:
                op = replace(op, deps=where[i - 1])
            where[i] = (len(out),)
            out.append(op)
            i += 1
            continue
        before = where[i - 1][-1]
        prev = tuple([before] * tiles)
        for j in range(i, end):
            here = []
            for t in range(tiles):
                here.append(len(out))
                out.append(replace(_tile(old[j], tiles, t), deps=(prev[t],)))
            where[j] = prev = tuple(here)
        i = end
    return Program(ops=out, phase=program.phase)
