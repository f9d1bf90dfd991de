"""Inference on one tensor-parallel replica: prefill (context encoding) of the prompt padded to
its compiled context bucket, then one decode (token generation) execution per output token that
reads the KV cache padded to its token-generation bucket, as NxD Inference compiles them
(`bucket=` and `tkg_bucket=`). An encoder runs one forward pass (`mode=infer`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import cached_property

from ..catalog.dtypes import get_dtype
from ..core import Instance
from .. import progress
from ..errors import SpecError
from ..program import Op, Program
from .cost import ZERO, Cost, measure, measure_part
from .memory import RUNTIME_RESERVE_BYTES, Memory, check_fits
from .parallel import Layout
from .pipelining import TILE_ROWS, is_tiled, pipeline_tiles
from .presets import ModelConfig
from .recipe import emit_forward
from .transformer import (CLASSIFIER_LABELS, Precision, classifier_recipe, embedding_recipe,
                          head_recipe, layer_recipe, make_shard, padded_heads,
                          shard_layer_params, shard_linear_params)

MIN_BUCKET = 128      # assumption: smallest compiled length (transformers-neuronx default)
# how lengths pad to compiled ones: 0 powers of two, N multiples of N, a tuple the listed sizes
Bucket = int | tuple[int, ...]
# token-generation buckets one estimate simulates (a decode program each, ~30 ms of CPU): NxD
# Inference compiles a handful; thousands mean a typo such as tkg_bucket=1
MAX_DECODE_BUCKETS = 1024
QUANT_SCALE_BYTES = 4  # assumption: one FP32 scale per output channel of a quantized weight
_RESIDENT_KINDS = ("binary", "activation", "layernorm", "rmsnorm", "softmax", "reduce", "cast",
                   "matmul")


def _tile_bytes(op: Op, free_elems: int) -> float:
    """SBUF bytes one token tile of an op's activations takes (inputs and output, in their
    dtypes): 128 rows of a row-wise op or a weight matmul's activation side, 128 partitions of
    `free_elems` elements of an elementwise op. The compiler runs these ops tile by tile along
    the tokens, so a tile, not the whole tensor, has to fit."""
    g = op.get
    b = get_dtype(g("dtype")).bytes
    if op.kind == "matmul":
        return min(g("m"), TILE_ROWS) * (g("k") * b + g("n") * get_dtype(g("out_dtype")).bytes)
    if op.kind in ("layernorm", "rmsnorm"):
        return 2.0 * min(g("rows"), TILE_ROWS) * g("hidden") * b
    if op.kind in ("softmax", "reduce"):
        return 2.0 * min(g("rows"), TILE_ROWS) * g("cols") * b
    return (g("inputs", 2) + 1) * min(g("elements"), TILE_ROWS * free_elems) * b


def keep_in_sbuf(program: Program, budget: float, free_elems: int) -> Program:
    """Inference keeps no activation for a backward pass: an op whose token tile fits the SBUF
    share left beside streamed weights reads and writes SBUF only (its producer's tiles feed
    it there). Weights, the KV cache, embeddings and collectives still move through HBM, and
    so does the op that consumes a collective's result (the CC-cores write it to HBM)."""
    ops: list[Op] = []
    for i, op in enumerate(program.ops):
        producers = op.deps if op.deps is not None else (i - 1,) if i else ()
        after_collective = any(ops[d].kind == "collective" for d in producers)
        fits = op.kind in _RESIDENT_KINDS and (op.kind != "matmul" or op.get("weights"))
        if fits and not after_collective and _tile_bytes(op, free_elems) <= budget:
            op = replace(op, params=tuple(sorted(op.params + (("resident", True),))))
        ops.append(op)
    return Program(ops=ops, phase=program.phase)


@dataclass(frozen=True, slots=True)
class InferSpec:
    model: ModelConfig
    batch: int
    input_len: int
    output_len: int
    bucket: Bucket         # context (prefill) buckets (see `padded`)
    prec: Precision
    layout: Layout
    flash: bool = True     # fused attention in prefill (decode runs matrix-vector attention)
    tkg_bucket: Bucket = -1  # token-generation buckets (KV cache length); -1: as `bucket`
    sp: bool = False       # sequence parallelism in prefill (NxD Inference; decode has 1 token)
    head: bool = True      # output head (an encoder's MLM head runs only when asked)
    classify: bool = False  # an encoder's sequence classifier (pooler and labels) instead
    cc_tiles: int = 1      # prefill's collectives pipelined in this many token tiles

    @property
    def cache_bucket(self) -> Bucket:
        return self.bucket if self.tkg_bucket == -1 else self.tkg_bucket


def padded(length: int, bucket: Bucket, limit: int) -> int:
    """The compiled length a sequence of `length` runs at. `bucket`: 0, powers of two from
    MIN_BUCKET; N, multiples of N; a tuple, the smallest of those sizes that holds it (as NxD
    Inference's bucket lists; the largest where none does, which a plan refuses first)."""
    if isinstance(bucket, tuple):
        size = next((s for s in bucket if s >= length), bucket[-1])
    elif bucket:
        size = -(-length // bucket) * bucket
    else:
        size = MIN_BUCKET
        while size < length:
            size *= 2
    return min(size, limit)


def bucket_counts(first: int, last: int, bucket: Bucket, limit: int) -> Counter:
    """How many of the lengths first..last run at each compiled length: one step a bucket
    (every length up to a bucket's size pads to it), not one a length, so a billion decode
    steps cost no more than the buckets they fall into. SpecError past MAX_DECODE_BUCKETS."""
    counts: Counter = Counter()
    n = first
    while n <= last:
        size = padded(n, bucket, limit)
        end = last if size < n else min(size, last)     # size < n: capped at the limit
        counts[size] += end - n + 1
        n = end + 1
        if len(counts) > MAX_DECODE_BUCKETS:
            raise SpecError(f"more than {MAX_DECODE_BUCKETS} token-generation buckets "
                            f"(tkg_bucket={bucket_text(bucket)} over {first}..{last} positions); "
                            "use a larger tkg_bucket or pow2")
    return counts


def bucket_text(bucket: Bucket) -> str:
    """A bucket setting as a workload spec writes it (a long list by its ends)."""
    if isinstance(bucket, tuple):
        shown = bucket if len(bucket) <= 6 else (*bucket[:3], "...", bucket[-1])
        return "/".join(map(str, shown))
    return str(bucket) if bucket else "pow2"


def _check_listed(length: int, bucket: Bucket, what: str, key: str) -> None:
    """A length past the largest size of a bucket list has no compiled program to run in."""
    if isinstance(bucket, tuple) and length > bucket[-1]:
        raise SpecError(f"{what} is longer than the largest of {key}={bucket_text(bucket)}; "
                        f"add a size of at least {length}")


def weighted_median(pairs: list[tuple[float, int]]) -> float:
    """The median of a population given as (value, how many) pairs: the middle one of an odd
    count, the mean of the two middle ones of an even count."""
    ordered = sorted(p for p in pairs if p[1] > 0)
    n = sum(k for _, k in ordered)
    if n == 0:
        raise ValueError("median of an empty population")

    def at(rank: int) -> float:             # the value at a 0-based rank of the sorted population
        seen = 0
        for value, k in ordered:
            seen += k
            if rank < seen:
                return value
        raise AssertionError("rank past the population")

    return (at((n - 1) // 2) + at(n // 2)) / 2


class InferencePlan:
    def __init__(self, inst: Instance, spec: InferSpec) -> None:
        cfg = spec.model
        # the last sampled token is never fed back: the cache holds in + out - 1 positions
        total = spec.input_len + spec.output_len - 1
        one_pass = cfg.family == "bert" or spec.output_len == 1     # an encoder, a prefill
        what = f"a sequence of {total} tokens" if one_pass else f"in+out-1 = {total} tokens"
        warning = cfg.check_length(total, what)
        self.warnings = (warning,) if warning else ()
        self.inst, self.spec, self.cfg = inst, spec, cfg
        tp = spec.layout.tp
        heads, kv = padded_heads(cfg, tp)
        if heads != cfg.heads:
            # an encoder keeps no KV cache (and has no separate KV heads to speak of)
            cached = cfg.family != "bert"
            kv_text = f" ({kv} KV heads)" if cached else ""
            charged = "compute, weights and KV cache" if cached else "compute and weights"
            self.warnings += (f"{cfg.name}: {cfg.heads} attention heads padded to {heads}"
                              f"{kv_text} for tp={tp}, as NxD Inference does; the zero heads' "
                              f"{charged} are charged",)
        self.shard = make_shard(cfg, tp, False, pad=True)
        self.prefill_shard = make_shard(cfg, tp, spec.sp, pad=True)
        self.limit = cfg.max_seq if total <= cfg.max_seq else 1 << 62
        self._check_bucket_lists()
        self.prefill_len = padded(spec.input_len, spec.bucket, self.limit)
        asked = padded(spec.input_len, spec.bucket, 1 << 62)
        prompt_capped = asked > self.prefill_len
        if prompt_capped:
            # a bucket past the positions the model has: compiled at the model's length
            kind = "learned positions" if cfg.family == "bert" else "trained context"
            self.warnings += (f"bucket {asked:,} for {spec.input_len:,} tokens is past "
                              f"{cfg.name}'s {self.limit:,}-token {kind}: compiled at "
                              f"{self.prefill_len:,}",)
        # decode step i (i = 1 .. out-1) attends to in + i positions of the cache
        first, last = spec.input_len + 1, spec.input_len + spec.output_len - 1
        self.decode_buckets = bucket_counts(first, last, spec.cache_bucket, self.limit)
        separate = spec.tkg_bucket != -1
        if self.decode_buckets and (separate or not prompt_capped):   # one warning a setting
            asked = padded(last, spec.cache_bucket, 1 << 62)
            if asked > self.limit:
                key = "tkg_bucket" if separate else "bucket"
                self.warnings += (f"{key} {asked:,} for {last:,} positions is past "
                                  f"{cfg.name}'s {self.limit:,}-token trained context: "
                                  f"compiled at {self.limit:,}",)

    def _check_bucket_lists(self) -> None:
        """Refuse a prompt, or a generation's last position, that outgrows its bucket list."""
        spec = self.spec
        prompt = "a sequence" if self.cfg.family == "bert" else "a prompt"
        _check_listed(spec.input_len, spec.bucket, f"{prompt} of {spec.input_len} tokens",
                      "bucket")
        if spec.output_len > 1:
            last = spec.input_len + spec.output_len - 1
            _check_listed(last, spec.cache_bucket, f"in+out-1 = {last} positions",
                          "tkg_bucket" if spec.tkg_bucket != -1 else "bucket")

    def _program(self, q_len: int, kv_len: int, layers: int) -> Program:
        cfg, spec, group = self.cfg, self.spec, self.spec.layout.tp_group
        sh = self.prefill_shard if q_len > 1 else self.shard
        b = spec.batch
        p = Program()
        emit_forward(p, embedding_recipe(cfg, sh, spec.prec, b * q_len, group, training=False), "embed.")
        layer = layer_recipe(cfg, sh, spec.prec, b, q_len, kv_len, group, training=False,
                             cache_write=cfg.family != "bert", flash=spec.flash and q_len > 1)
        for i in range(layers):
            emit_forward(p, layer, f"layer{i}.")
        if spec.head:
            emit_forward(p, head_recipe(cfg, sh, spec.prec, b, group, training=False), "head.")
        elif spec.classify:
            emit_forward(p, classifier_recipe(cfg, spec.prec, b), "classifier.")
        if q_len > 1:
            p = pipeline_tiles(p, spec.cc_tiles)
        costs = self.inst.costs
        budget = self.inst.device.sbuf_bytes * costs.sbuf_usable_fraction * costs.sbuf_activation_share
        return keep_in_sbuf(p, budget, costs.tile_free_elems)

    def prefill_program(self, layers: int | None = None) -> Program:
        n = self.cfg.layers if layers is None else layers
        return self._program(self.prefill_len, self.prefill_len, n)

    def decode_program(self, kv_len: int, layers: int | None = None) -> Program:
        return self._program(1, kv_len, self.cfg.layers if layers is None else layers)

    def _cost(self, q_len: int, kv_len: int) -> Cost:
        """Embedding and head once, the first layer, then the layers after it at the cost of
        a second one: a layer that follows a layer runs in steady state (its first weights
        stream in behind the previous layer's last matmul), which the first, after the
        embedding, does not."""
        ends = measure(self.inst, self._program(q_len, kv_len, 0))
        one, own = measure_part(self.inst, self._program(q_len, kv_len, 1), "layer0.")
        # A layer costs the time it adds, split as its own ops' critical path is: the
        # difference of two runs' splits goes negative where the ends' ops are bound
        # differently next to a layer (a head's DMA hidden behind it, say).
        first = (one + ends * -1).split_as(own)
        if self.cfg.layers < 2:
            return ends + first * self.cfg.layers
        two, own2 = measure_part(self.inst, self._program(q_len, kv_len, 2), "layer1.")
        steady = (two + one * -1).split_as(own2)
        return ends + first + steady * (self.cfg.layers - 1)

    @cached_property
    def prefill(self) -> Cost:
        return self._cost(self.prefill_len, self.prefill_len)

    @cached_property
    def prefill_tiled(self) -> bool:
        """Whether the prompt's collectives run in `cc_tiles` tiles: a run holding one must
        split into tiles of at least a matmul tile of tokens each."""
        return self.spec.cc_tiles > 1 and is_tiled(self.prefill_program(layers=1))

    @cached_property
    def prefill_model_flops(self) -> float:
        """The model FLOPs of the prompt's own tokens: padding to the bucket is work the chip
        does (hardware FLOPs, HFU) but not the model's (MFU)."""
        if self.prefill_len == self.spec.input_len:
            return self.prefill.model_flops
        return self._cost(self.spec.input_len, self.spec.input_len).model_flops

    @cached_property
    def decode(self) -> dict[int, Cost]:
        costs, total = {}, len(self.decode_buckets)
        for kv in self.decode_buckets:
            costs[kv] = self._cost(1, kv)
            progress.step("token-generation buckets", len(costs), total)
        return costs

    def token_latencies(self) -> dict[int, float]:
        """Each token-generation bucket's time per output token, its execution's launch too."""
        overhead = self.inst.costs.exec_overhead_s
        return {kv: self.decode[kv].time + overhead for kv in self.decode_buckets}

    def tpot_mean(self) -> float:
        """The output tokens' mean time: what throughput and end-to-end latency follow."""
        if not self.decode_buckets:
            return 0.0
        times = self.token_latencies()
        n = sum(self.decode_buckets.values())
        return sum(times[kv] * k for kv, k in self.decode_buckets.items()) / n

    def decode_mean(self) -> Cost:
        """The decode steps' mean cost, each bucket weighted by the tokens generated at it: the
        step whose time (plus the launch) is `tpot_mean`, so its split, FLOPs, bytes and engine
        time are the ones that time is made of."""
        n = sum(self.decode_buckets.values())
        return sum((self.decode[kv] * (k / n) for kv, k in self.decode_buckets.items()), ZERO)

    def tpot(self) -> float:
        """The median (P50) time per output token, the figure AWS's performance tables publish
        ("TPOT Latency P50"): with several buckets, the latency of the one that holds the
        middle token, above the mean where the short early buckets are quicker."""
        if not self.decode_buckets:
            return 0.0
        times = self.token_latencies()
        return weighted_median([(times[kv], k) for kv, k in self.decode_buckets.items()])

    def output_bytes(self) -> float:
        """What a forward over the prompt hands back to the host, in the activation dtype: the
        logits its head computes (one position per sequence, as the program does), a
        classifier's labels, or else the last hidden state of every token."""
        spec, cfg = self.spec, self.cfg
        per_sequence = (cfg.vocab if spec.head else CLASSIFIER_LABELS if spec.classify
                        else self.prefill_len * cfg.hidden)
        return spec.batch * per_sequence * spec.prec.act_bytes

    def memory(self) -> Memory:
        cfg, sh, spec, prec = self.cfg, self.shard, self.spec, self.spec.prec
        h = cfg.hidden
        # the embedding's shard, and an output head's unless it is the embedding itself (tied:
        # GPT's, and BERT's MLM decoder, there or not)
        tables = 1 if cfg.tied_embeddings else 2
        params = (cfg.layers * shard_layer_params(cfg, sh) + tables * sh.vocab * h
                  + cfg.embedding_params() - cfg.vocab * h)
        weights = params * prec.weight_bytes
        if prec.quant:        # the layers' linear weights narrower, plus a scale per output channel
            linear, outs = shard_linear_params(cfg, sh)
            weights += cfg.layers * (linear * (get_dtype(prec.quant).bytes - prec.weight_bytes)
                                     + outs * QUANT_SCALE_BYTES)
        # the cache holds every position a program writes: the prompt's bucket too, where it
        # is longer than the token-generation buckets, and NxD sizes it to the longest bucket
        # it compiles: the largest of a list, used by this request or not
        listed = [min(b[-1], self.limit) for b in (spec.bucket, spec.cache_bucket)
                  if isinstance(b, tuple) and cfg.family != "bert"]
        longest = max(max(self.decode_buckets, default=0), self.prefill_len, *listed)
        kv = (spec.batch * longest * 2 * sh.kv_heads * sh.head_dim * cfg.layers * prec.act_bytes
              if cfg.family != "bert" else 0.0)
        tokens = spec.batch * self.prefill_len
        # the residual stream and the norms' tensors, whole on every rank unless sequence
        # parallelism splits the prompt's tokens among them
        stream = 4 * h / (sh.tp if self.prefill_shard.sp else 1)
        work = tokens * (stream + (sh.heads + 2 * sh.kv_heads) * sh.head_dim + 3 * sh.ffn) \
            * prec.act_bytes
        if not spec.flash:
            work += tokens * sh.heads * self.prefill_len * prec.act_bytes
        cap = self.inst.device.hbm_bytes / self.inst.device.logical_cores(self.inst.lnc)
        return Memory(weights, 0.0, 0.0, work, kv, RUNTIME_RESERVE_BYTES, cap)

    def check_memory(self) -> Memory:
        mem = self.memory()
        sp = "sp=1, " if self.shard.tp > 1 and not self.prefill_shard.sp else ""
        check_fits(f"{self.cfg.name} inference", mem,
                   f"try a larger --tp, {sp}weights=int8, dtype=fp8, or a smaller batch or length")
        return mem
