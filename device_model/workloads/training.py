"""A training step on one representative rank per pipeline stage.

Step = micro-batches through a 1F1B pipeline (forward, optional recompute, backward, FP32 gradient
accumulation), then the data-parallel gradient reduction (all-reduce, or ZeRO-1 reduce-scatter,
overlapped with the last backward unless `dp_overlap` is off), AdamW on FP32 master weights (a
1/dp shard under ZeRO-1) and, with ZeRO-1, the all-gather of the updated weights. One layer per
distinct shape is simulated and scaled by the stage's layer count; `microbatch_program` emits the
unrolled stream for consumers.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..core import Instance
from ..errors import SpecError
from ..program import Program
from .cost import ZERO, Cost, measure
from .memory import (RUNTIME_RESERVE_BYTES, Memory, check_fits, in_flight_microbatches,
                     layer_activation_bytes)
from .parallel import Layout
from .presets import ModelConfig
from .recipe import emit_backward, emit_forward
from .transformer import (Precision, embedding_recipe, head_recipe, layer_recipe, make_shard,
                          shard_layer_params)


@dataclass(frozen=True, slots=True)
class TrainSpec:
    model: ModelConfig
    seq: int
    mbs: int
    gbs: int
    prec: Precision
    zero1: bool
    ckpt: str            # none | selective | full
    sp: bool
    layout: Layout
    flash: bool = True   # fused attention
    # the data-parallel gradient reduction runs under the last backward (NxD, Megatron, DDP
    # buckets), or after it as a program of its own (torch-xla data-parallel scripts, whose
    # `xm.mark_step()` ends the backward's graph before the reduction is traced)
    dp_overlap: bool = True
    # unfused attention's softmax as torch-neuronx's custom lowering (NEURON_FUSE_SOFTMAX=1, as
    # NxD's scripts set): forward and backward each one op; else the backward's decomposed graph
    fused_softmax: bool = False

    @property
    def microbatches(self) -> int:
        return self.gbs // (self.mbs * self.layout.dp)


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage; a remainder goes to the middle stages (the ends carry the
    embedding and the head)."""
    if layers < pp:
        raise SpecError(f"pp={pp} exceeds the model's {layers} layers")
    base, extra = divmod(layers, pp)
    counts = [base] * pp
    order = list(range(1, pp - 1)) + [0, pp - 1] if pp > 2 else list(range(pp))
    for s in order[:extra]:
        counts[s] += 1
    return counts


class TrainingPlan:
    """Recipes and programs of one rank per stage, and the step they add up to."""

    def __init__(self, inst: Instance, spec: TrainSpec) -> None:
        cfg, lay = spec.model, spec.layout
        if spec.gbs % (spec.mbs * lay.dp):
            raise SpecError(f"gbs={spec.gbs} is not a multiple of mbs*dp = {spec.mbs}*{lay.dp}")
        warning = cfg.check_length(spec.seq, f"seq={spec.seq}")
        self.warnings = (warning,) if warning else ()
        if lay.pp > 1 and spec.microbatches < lay.pp:
            # the default gbs (mbs*dp) gives a pipeline one micro-batch: its stages mostly wait
            n, least = spec.microbatches, lay.pp * spec.mbs * lay.dp
            self.warnings += (f"{n} micro-batch{'es' if n > 1 else ''} for {lay.pp} pipeline "
                              "stages: most of the step is the pipeline filling and draining; a "
                              f"gbs of at least {least} ({lay.pp} micro-batches) keeps them busy",)
        self.inst, self.spec, self.cfg = inst, spec, cfg
        self.shard = make_shard(cfg, lay.tp, spec.sp)
        if spec.sp and lay.tp > 1 and spec.seq % lay.tp:
            # NxD and Megatron scatter the sequence in equal parts and refuse otherwise
            raise SpecError(f"sequence parallelism splits seq={spec.seq} over tp={lay.tp}: give a "
                            "seq divisible by tp, or sp=off")
        self.tokens = spec.mbs * spec.seq
        tp_group = lay.tp_group
        self.layer = layer_recipe(cfg, self.shard, spec.prec, spec.mbs, spec.seq, spec.seq,
                                  tp_group, training=True, flash=spec.flash,
                                  fused_softmax=spec.fused_softmax)
        self.embed = embedding_recipe(cfg, self.shard, spec.prec, self.tokens, tp_group, training=True)
        self.head = head_recipe(cfg, self.shard, spec.prec, self.tokens, tp_group, training=True)
        self.layers = stage_layers(cfg.layers, lay.pp)
        self.layer_params = shard_layer_params(cfg, self.shard)
        h = cfg.hidden
        self.embed_params = self.shard.vocab * h + (cfg.embedding_params() - cfg.vocab * h)
        head_untied = 0 if cfg.tied_embeddings else self.shard.vocab * h
        self.head_params = head_untied + (cfg.head_params() - (0 if cfg.tied_embeddings else cfg.vocab * h))
        split = lay.tp if self.shard.sp else 1
        self.p2p_bytes = int(self.tokens * h * spec.prec.act_bytes / split)

    # --- programs ------------------------------------------------------------------------------
    def stage_params(self, s: int) -> int:
        last = self.spec.layout.pp - 1
        return (self.layers[s] * self.layer_params + (self.embed_params if s == 0 else 0)
                + (self.head_params if s == last else 0))

    def _layer_backward(self, p: Program, prefix: str) -> None:
        ckpt = self.spec.ckpt
        if ckpt != "none":
            emit_forward(p, self.layer, "recompute." + prefix, only="attn" if ckpt == "selective" else None)
        emit_backward(p, self.layer, prefix)
        if self.spec.microbatches > 1:
            p.binary("add", self.layer_params, "fp32", name=prefix + "grad_accumulate")

    def microbatch_program(self, s: int, layers: int | None = None) -> Program:
        """Forward and backward of one micro-batch on stage `s` (all its layers unless given);
        layers are named by their index in the whole model."""
        lay, n = self.spec.layout, self.layers[s] if layers is None else layers
        first = sum(self.layers[:s])
        p = Program()
        if s == 0:
            emit_forward(p, self.embed, "embed.")
        for i in range(first, first + n):
            emit_forward(p, self.layer, f"layer{i}.")
        if s == lay.pp - 1:
            emit_forward(p, self.head, "head.")
        else:
            p.collective("send_recv", self.p2p_bytes, lay.pp_pair_after(s),
                         name="pp.send_activations")
        p.phase = "backward"
        if s == lay.pp - 1:
            emit_backward(p, self.head, "head.")
        for i in reversed(range(first, first + n)):
            self._layer_backward(p, f"layer{i}.")
        if s == 0:
            emit_backward(p, self.embed, "embed.")
        else:
            p.collective("send_recv", self.p2p_bytes, lay.pp_pair_after(s - 1),
                         name="pp.send_gradients")
        return p

    def sync_program(self, s: int) -> Program:
        """Data-parallel gradient reduction of stage `s` (FP32 gradients)."""
        p = Program(phase="backward")
        lay = self.spec.layout
        if lay.dp > 1:
            kind = "reduce_scatter" if self.spec.zero1 else "all_reduce"
            p.collective(kind, self.stage_params(s) * 4, lay.dp_group, dtype="fp32",
                         name=f"dp.{kind}")
        return p

    def optimizer_program(self, s: int) -> Program:
        """AdamW over this rank's parameters (its 1/dp shard under ZeRO-1), unfused."""
        p = Program(phase="optimizer")
        lay, prec = self.spec.layout, self.spec.prec
        n = self.stage_params(s) // (lay.dp if self.spec.zero1 else 1) or 1
        p.binary("mul", n, "fp32", name="adamw.m_decay")
        p.binary("add", n, "fp32", name="adamw.m_update")
        p.activation("square", n, "fp32", name="adamw.g_square")
        p.binary("add", n, "fp32", name="adamw.v_update")
        p.activation("sqrt", n, "fp32", name="adamw.v_sqrt")
        p.binary("div", n, "fp32", name="adamw.step")
        p.binary("sub", n, "fp32", name="adamw.update")
        if prec.name != "fp32":
            p.cast(n, "fp32", "bf16", name="adamw.cast_weights")
        if self.spec.zero1 and lay.dp > 1:
            p.collective("all_gather", int(self.stage_params(s) * prec.weight_bytes), lay.dp_group,
                         name="zero1.all_gather_weights")
        return p

    # --- costs ------------------------------------------------------------------------------
    @cached_property
    def parts(self) -> dict[str, Cost]:
        """Each distinct piece simulated once."""
        one = {"layer_f": Program(), "layer_b": Program(phase="backward")}
        emit_forward(one["layer_f"], self.layer, "layer0.")
        self._layer_backward(one["layer_b"], "layer0.")
        pieces = {"embed_f": (self.embed, False), "embed_b": (self.embed, True),
                  "head_f": (self.head, False), "head_b": (self.head, True)}
        for key, (recipe, back) in pieces.items():
            p = Program(phase="backward" if back else "forward")
            (emit_backward if back else emit_forward)(p, recipe, key.split("_")[0] + ".")
            one[key] = p
        return {k: measure(self.inst, p) for k, p in one.items()}

    @cached_property
    def p2p(self) -> tuple[Cost, ...]:
        """One send across each stage boundary, each kind of pair simulated once (a boundary
        inside a node and one across EFA cost differently)."""
        lay, measured = self.spec.layout, {}
        for b in range(lay.pp - 1):
            pair = lay.pp_pair_after(b)
            if pair not in measured:
                p = Program()
                p.collective("send_recv", self.p2p_bytes, pair, name="pp.send")
                measured[pair] = measure(self.inst, p)
        return tuple(measured[lay.pp_pair_after(b)] for b in range(lay.pp - 1))

    def microbatch_cost(self, s: int) -> Cost:
        c, last = self.parts, self.spec.layout.pp - 1
        cost = (c["layer_f"] + c["layer_b"]) * self.layers[s]
        if s == 0:
            cost = cost + c["embed_f"] + c["embed_b"]
        if s == last:
            cost = cost + c["head_f"] + c["head_b"]
        if s < last:
            cost = cost + self.p2p[s]          # its activations to the next stage
        if s > 0:
            cost = cost + self.p2p[s - 1]      # its gradients back to the one before
        return cost

    def memory(self, s: int) -> Memory:
        spec, cfg, sh, prec = self.spec, self.cfg, self.shard, self.spec.prec
        lay = spec.layout
        params = self.stage_params(s)
        per_layer = layer_activation_bytes(cfg, sh, prec, spec.mbs, spec.seq, spec.ckpt, spec.flash)
        live = in_flight_microbatches(s, lay.pp, spec.microbatches) * self.layers[s] * per_layer
        if spec.ckpt == "full":        # one layer's full activations exist while it recomputes
            live += layer_activation_bytes(cfg, sh, prec, spec.mbs, spec.seq, "none", spec.flash)
        if s == lay.pp - 1:            # logits and their FP32 softmax
            live += self.tokens * sh.vocab * (prec.act_bytes + 4)
        cap = self.inst.device.hbm_bytes / self.inst.device.logical_cores(self.inst.lnc)
        return Memory(params * prec.weight_bytes, params * prec.grad_bytes,
                      params * prec.optimizer_bytes / (lay.dp if spec.zero1 else 1), live, 0.0,
                      RUNTIME_RESERVE_BYTES, cap)

    def _memory_hint(self) -> str:
        """What would make the run fit, leaving out what it already does (it suggested zero1=on
        to a run with ZeRO-1 on, and ckpt=selective to one checkpointing selectively)."""
        spec, lay = self.spec, self.spec.layout
        # every rank holds a part of one model already: a larger split needs more of them
        more = (" with more --nodes" if lay.ranks >= lay.cores_per_node * lay.nodes
                else " with more --cores") if lay.dp == 1 else ""
        options = [f"a larger --tp or --pp{more}"]
        if not spec.zero1:
            options.append("zero1=on" if lay.dp > 1 else "more data-parallel ranks "
                           "with zero1=on")
        if spec.ckpt != "full":
            options.append("ckpt=full" if spec.ckpt == "selective" else "ckpt=selective or full")
        if spec.mbs > 1:
            options.append("a smaller mbs")
        return "; ".join(options)

    def check_memory(self) -> Memory:
        worst = max((self.memory(s) for s in range(self.spec.layout.pp)), key=lambda m: m.total)
        check_fits(f"{self.cfg.name} training", worst, "try any of: " + self._memory_hint())
        return worst


@dataclass(frozen=True, slots=True)
class StepEstimate:
    step_time: float
    stage: int                  # representative (critical) stage
    rank_cost: Cost             # that rank's busy work over one step
    breakdown: dict
    job_model_flops: float
    job_hardware_flops: float


def estimate_step(plan: TrainingPlan) -> StepEstimate:
    spec, lay = plan.spec, plan.spec.layout
    overhead = plan.inst.costs.exec_overhead_s
    m = spec.microbatches
    mb = [plan.microbatch_cost(s) for s in range(lay.pp)]
    t_mb = [c.time + overhead for c in mb]
    t_pipe = (m - 1) * max(t_mb) + sum(t_mb)
    tails, extras = [], []
    opt_cache: dict[int, tuple[Cost, Cost]] = {}
    for s in range(lay.pp):
        key = plan.stage_params(s)
        if key not in opt_cache:
            opt_cache[key] = (measure(plan.inst, plan.sync_program(s)),
                              measure(plan.inst, plan.optimizer_program(s)))
        sync, opt = opt_cache[key]
        window = plan.layers[s] * plan.parts["layer_b"].time
        hidden = (min(sync.time * (1 - 1 / max(1, plan.layers[s])), window)
                  if spec.dp_overlap else 0.0)
        exposed = sync.time - hidden
        tails.append(exposed + opt.time + overhead)
        extras.append((sync, opt, hidden, exposed))
    busy = [m * t_mb[s] + tails[s] for s in range(lay.pp)]
    rep = max(range(lay.pp), key=busy.__getitem__)
    step = t_pipe + max(tails)
    sync, opt, hidden, exposed = extras[rep]
    opt_coll = opt.collective
    # collectives that ran under a micro-batch's compute (TP collectives beside the weight
    # gradients): busy, but not on its critical path
    hidden_mb = max(0.0, mb[rep].collective_active - mb[rep].collective)
    breakdown = {
        "compute_s": m * mb[rep].compute,
        "dma_s": m * mb[rep].dma,
        "optimizer_s": opt.compute + opt.dma,
        "collective_exposed_s": m * mb[rep].collective + exposed + opt_coll,
        "collective_hidden_s": hidden + m * hidden_mb,
        "bubble_s": step - busy[rep],
        "overhead_s": (m + 1) * overhead,
    }
    rank = mb[rep] * m + opt + sync
    job = sum((mb[s] * m + extras[s][1] for s in range(lay.pp)), ZERO)
    ranks_per_stage = lay.tp * lay.dp
    return StepEstimate(step, rep, rank, breakdown, job.model_flops * ranks_per_stage,
                        job.hardware_flops * ranks_per_stage)
