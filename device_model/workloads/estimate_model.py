"""Model workloads by preset name: option schema, `estimate` (what `neuron-sim estimate` prints)
and `build_step` (the programs one step runs, for the simulated runtime and the profiler)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import Instance
from ..errors import SpecError
from ..program import Program
from ..catalog.specs import check_dtype
from ..runtime.layout import ENGINES as ENGINE_KEYS
from .cost import Cost, Split
from .inference import MAX_DECODE_BUCKETS, Bucket, InferencePlan, InferSpec
from .pipelining import MAX_TILES, TILE_ROWS
from .memory import CHECKPOINTS, Memory
from .parallel import Layout, resolve_layout
from .presets import ModelConfig
from .spec import Param, parse_int
from .training import TrainingPlan, TrainSpec, estimate_step
from .transformer import PRECISIONS, WEIGHT_STORAGE, Precision, precision, quantized

MODES = ("train", "prefill", "decode", "infer")
_NOT_FOR = {   # options that do not apply to a mode
    "train": ("batch", "in", "out", "bucket", "tkg_bucket", "head", "weights", "cc_tiles"),
    "prefill": ("seq", "mbs", "gbs", "zero1", "ckpt", "out", "tkg_bucket", "dp_overlap",
                "softmax"),
    "decode": ("seq", "mbs", "gbs", "zero1", "ckpt", "dp_overlap", "softmax"),
    "infer": ("in", "out", "mbs", "gbs", "zero1", "ckpt", "tkg_bucket", "dp_overlap", "softmax"),
}
_ON = ("on", "1")


def options_left_for(mode: str, opts: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """A model's options that apply to `mode`, and the keys of those left out (a decode's
    `out` beside its prompt's pass, a training run's `gbs` beside a decode)."""
    dropped = [k for k in opts if k in _NOT_FOR.get(mode, ())]
    return {k: v for k, v in opts.items() if k not in dropped}, dropped


def _on_off(text: str) -> bool:
    return text in _ON


def _bucket(text: str) -> Bucket:
    """pow2 (0), a multiple N, or sizes listed as 2048/4096/12288 (a tuple, ascending)."""
    if text.lower() == "pow2":     # as the options with named values, in any case (sp=ON)
        return 0
    if "/" not in text:
        return parse_int(text)
    sizes = tuple(sorted({parse_int(size) for size in text.split("/")}))
    if len(sizes) > MAX_DECODE_BUCKETS:
        raise ValueError(text)
    return sizes


def _cc_tiles(text: str) -> int:
    tiles = parse_int(text)
    if tiles > MAX_TILES:
        raise ValueError(text)
    return tiles


DEFAULT_MODE = "train"

MODEL_PARAMS = (
    Param("mode", str, DEFAULT_MODE, choices=MODES),
    Param("dtype", str, "bf16", choices=PRECISIONS, help="matmul precision"),
    Param("seq", parse_int, 0, help="training sequence length"),
    Param("mbs", parse_int, 0, help="micro-batch size per data-parallel rank"),
    Param("gbs", parse_int, 0, help="global batch size in sequences"),
    Param("zero1", str, "", choices=("on", "off")),
    Param("ckpt", str, "", choices=CHECKPOINTS),
    Param("sp", str, "", choices=("on", "off", "1", "0")),
    Param("batch", parse_int, 0, help="inference batch size per replica"),
    Param("in", parse_int, 0, help="prompt tokens"),
    Param("out", parse_int, 0, help="generated tokens"),
    Param("bucket", _bucket, -1,
          help="context buckets: pow2, a length multiple N, or sizes as 2048/4096/12288"),
    Param("tkg_bucket", _bucket, -1,
          help="token-generation buckets: pow2, a length multiple N, or sizes as 4096/12800"),
    Param("attn", str, "", choices=("flash", "unfused"), help="attention kernel"),
    Param("softmax", str, "", choices=("fused", "xla"),
          help="training with attn=unfused: fused = torch-neuronx's softmax lowering "
               "(NEURON_FUSE_SOFTMAX=1), its backward one op; xla = the decomposed graph"),
    Param("head", str, "", choices=("on", "off", "1", "0", "cls"),
          help="run the output head; cls: an encoder's sequence classifier instead"),
    Param("autocast", str, "", choices=("matmul", "none"),
          help="dtype=fp32: matmul = neuronx-cc's default cast of FP32 matmuls to BF16"),
    Param("dp_overlap", str, "", choices=("on", "off", "1", "0"),
          help="training: reduce gradients under the last backward (on) or after it (off)"),
    Param("weights", str, "", choices=WEIGHT_STORAGE,
          help="inference: the layers' weight storage (int8/fp8: weight-only quantization)"),
    Param("cc_tiles", _cc_tiles, 0,
          help="inference: token tiles a prompt's collectives pipeline in, 1 to "
               f"{MAX_TILES} (NxD Inference's cc_pipeline_tiling_factor; 1: none)"),
)
DEFAULT_PROMPT = 128     # a decoder's prompt tokens when the spec gives no `in`
_UNSET = {"seq": 0, "mbs": 0, "gbs": 0, "zero1": "", "ckpt": "", "sp": "", "batch": 0, "in": 0,
          "out": 0, "bucket": -1, "tkg_bucket": -1, "attn": "", "head": "", "autocast": "",
          "weights": "", "dp_overlap": "", "softmax": "", "cc_tiles": 0}


@dataclass(frozen=True, slots=True)
class Execution:
    """One compiled graph the runtime executes `count` times per step."""
    name: str
    program: Program
    count: int


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one step of a workload is, per pipeline stage (index 0 .. pp-1; one stage for
    inference): the executions of one representative rank, and the work the whole job does."""
    workload: str
    mode: str
    layout: Layout
    stages: tuple[tuple[Execution, ...], ...]
    sequences_per_step: int
    tokens_per_step: int
    memory: Memory          # HBM per logical core of the fullest stage (checked: it fits)


def _check_keys(cfg: ModelConfig, opts: dict[str, Any]) -> None:
    given = {k for k, v in opts.items() if k in _UNSET and v != _UNSET[k]}
    bad = sorted(given & set(_NOT_FOR[opts["mode"]]))
    if bad:
        raise SpecError(f"{cfg.name}: option {bad[0]!r} does not apply to mode={opts['mode']}")
    if cfg.family == "bert" and opts["mode"] == "decode":
        raise SpecError(f"{cfg.name} is an encoder (nothing to decode); allowed modes: train, "
                        "infer, prefill")
    if opts["head"] == "cls" and not (cfg.family == "bert" and opts["mode"] == "infer"):
        raise SpecError(f"{cfg.name}: head=cls is an encoder's sequence classifier "
                        f"(mode=infer of an encoder), not mode={opts['mode']}")


def _autocast(opts: dict) -> bool:
    if opts["autocast"] == "matmul" and opts["dtype"] != "fp32":   # `none` goes with any dtype
        raise SpecError(f"option 'autocast' applies to dtype=fp32 only (dtype={opts['dtype']})")
    return opts["autocast"] == "matmul"


def _infer_precision(opts: dict) -> Precision:
    return quantized(precision(opts["dtype"], False, _autocast(opts)), opts["weights"])


def _flash(cfg: ModelConfig, opts: dict) -> bool:
    """Fused attention unless asked otherwise or the model trains with attention dropout."""
    if opts["attn"]:
        return opts["attn"] == "flash"
    return not (cfg.dropout and opts["mode"] == "train")


def _fused_softmax(cfg: ModelConfig, opts: dict) -> bool:
    if opts["softmax"] and _flash(cfg, opts):
        raise SpecError(f"{cfg.name}: option 'softmax' applies to attn=unfused (the flash "
                        "kernel keeps its softmax inside)")
    return opts["softmax"] == "fused"


def _layout(cfg: ModelConfig, inst: Instance, opts: dict, placement) -> Layout:
    # an encoder is served one model per core (torch_neuronx.DataParallel, as AWS's encoder
    # tables run it): splitting its small layers over cores adds collectives and saves nothing
    return resolve_layout(inst, placement.nodes, placement.cores, placement.tp, placement.pp,
                          placement.dp, heads=cfg.heads, training=opts["mode"] == "train",
                          replicas_first=cfg.family == "bert")


def train_plan(cfg: ModelConfig, inst: Instance, opts: dict, placement) -> TrainingPlan:
    lay = _layout(cfg, inst, opts, placement)
    mbs = opts["mbs"] or 1
    spec = TrainSpec(cfg, opts["seq"] or cfg.default_seq, mbs, opts["gbs"] or mbs * lay.dp,
                     precision(opts["dtype"], True, _autocast(opts)), opts["zero1"] != "off" and lay.dp > 1,
                     opts["ckpt"] or "none", opts["sp"] not in ("off", "0"), lay, _flash(cfg, opts),
                     dp_overlap=opts["dp_overlap"] not in ("off", "0"),
                     fused_softmax=_fused_softmax(cfg, opts))
    plan = TrainingPlan(inst, spec)
    plan.warnings += _idle_sp(opts, lay)
    if opts["zero1"] == "on" and lay.dp == 1:       # asked for, and nothing to shard over
        plan.warnings += ("zero1=on has no effect with dp=1: it shards the optimizer state "
                          "over the data-parallel ranks, and there is only one",)
    if opts["dp_overlap"] and lay.dp == 1:
        plan.warnings += (f"dp_overlap={opts['dp_overlap']} has no effect with dp=1: it places "
                          "the gradients' all-reduce, and there is only one replica",)
    return plan


def infer_plan(cfg: ModelConfig, inst: Instance, opts: dict, placement) -> InferencePlan:
    lay = _layout(cfg, inst, opts, placement)
    encoder = opts["mode"] == "infer"
    prompt = (opts["seq"] or cfg.default_seq) if encoder else (opts["in"] or DEFAULT_PROMPT)
    # a decoder's head picks the next token; an encoder's MLM head runs only when asked, and
    # head=cls puts a sequence classifier in its place
    classify = opts["head"] == "cls"
    head = _on_off(opts["head"]) if opts["head"] else not (encoder and cfg.family == "bert")
    # A traced forward pass (torch-neuronx) is compiled at the shape it was traced with: an
    # encoder runs its sequence as given. A decoder's context encoding pads to its buckets.
    bucket = opts["bucket"] if opts["bucket"] != -1 else (1 if encoder else 0)
    spec = InferSpec(cfg, opts["batch"] or 1, prompt,
                     opts["out"] or (128 if opts["mode"] == "decode" else 1),
                     bucket, _infer_precision(opts), lay,
                     _flash(cfg, opts), tkg_bucket=opts["tkg_bucket"],
                     sp=_on_off(opts["sp"]), head=head, classify=classify,
                     cc_tiles=opts["cc_tiles"] or 1)
    plan = InferencePlan(inst, spec)
    plan.warnings += _idle_sp(opts, lay)
    if opts["mode"] == "prefill" and not cfg.causal:
        plan.warnings += (f"{cfg.name} is an encoder: mode=prefill runs it as a decoder's prompt "
                          "pass, with its output head, where no token follows; mode=infer is its "
                          "forward pass, as AWS's encoder tables publish it",)
    return plan


def _idle_sp(opts: dict, lay: Layout) -> tuple[str, ...]:
    """A warning where sequence parallelism is asked for and has no ranks to split over."""
    if not _on_off(opts["sp"]) or lay.tp > 1:
        return ()
    where = "its" if opts["mode"] == "train" else "the prompt's"
    return (f"sp={opts['sp']} has no effect with tp=1: it splits {where} norms and "
            "residuals over the tensor-parallel ranks, and there is only one",)


def _prepare(cfg: ModelConfig, inst: Instance, opts: dict, placement):
    _check_keys(cfg, opts)
    check_dtype(inst.spec, opts["dtype"])
    plan = (train_plan if opts["mode"] == "train" else infer_plan)(cfg, inst, opts, placement)
    plan.warnings += fp8_warning(inst, opts["dtype"])
    return plan


def fp8_warning(inst: Instance, dtype: str) -> tuple[str, ...]:
    """FP8 on a chip whose TensorE has no faster FP8 rate (Trainium1): said, as it is no typo."""
    if dtype != "fp8" or inst.device.fp8_speedup > 1:
        return ()
    return (f"dtype=fp8 on {inst.device.name.capitalize()}: its TensorE runs FP8 at the BF16 "
            "rate, so FP8 halves the bytes moved, not the matmuls' time",)


# --- estimate ----------------------------------------------------------------------------------
def _ratios(inst: Instance, cost: Cost, time: float, ranks_work_flops: tuple[float, float] | None,
            ranks: int) -> dict:
    dev = inst.device
    peak = 2.0 * dev.pe_rows * dev.pe_cols * dev.tensor_hz * inst.lnc     # BF16, one logical core
    model, hw = ranks_work_flops or (cost.model_flops * ranks, cost.hardware_flops * ranks)
    busy = cost.engine_seconds()
    return {
        "mfu": model / (peak * time * ranks),
        "hfu": hw / (peak * time * ranks),
        "mbu": cost.hbm_bytes / time / dev.hbm_bw_per_stack,
        "engine_active": {e: min(1.0, busy[e] / time) for e in ENGINE_KEYS},
        "collective_active": min(1.0, cost.collective_active / time),
        "model_flops": model, "hardware_flops": hw,
    }


def _model_info(cfg: ModelConfig) -> dict:
    return {"name": cfg.name, "params": cfg.params(), "layers": cfg.layers, "hidden": cfg.hidden,
            "heads": cfg.heads, "kv_heads": cfg.kv_heads, "ffn": cfg.ffn, "vocab": cfg.vocab}


def estimate_train(plan: TrainingPlan) -> dict:
    spec, lay = plan.spec, plan.spec.layout
    mem = plan.check_memory()
    est = estimate_step(plan)
    t = est.step_time
    return {
        "mode": "train", "model": _model_info(plan.cfg),
        "parallel": {**lay.describe(), "sp": plan.shard.sp, "zero1": spec.zero1,
                     "ckpt": spec.ckpt, "attention": "flash" if spec.flash else "unfused",
                     **({} if spec.flash
                        else {"softmax": "fused" if spec.fused_softmax else "xla"}),
                     "dp_overlap": spec.dp_overlap, "microbatches": spec.microbatches,
                     "layers_per_stage": plan.layers, "critical_stage": est.stage},
        "dtype": spec.prec.name, "matmul_dtype": spec.prec.matmul,
        "seq": spec.seq, "mbs": spec.mbs, "gbs": spec.gbs,
        "time_s": t, "step_time_s": t,
        "sequences_per_s": spec.gbs / t, "tokens_per_s": spec.gbs * spec.seq / t,
        **_ratios(plan.inst, est.rank_cost, t, (est.job_model_flops, est.job_hardware_flops),
                  lay.ranks),
        "breakdown": est.breakdown,
        "memory": mem.as_dict(),
        **({"warnings": list(plan.warnings)} if plan.warnings else {}),
    }


def _breakdown(cost: Cost, overhead: float, optimizer: Split | Cost = Split(),
               pipelined: bool = False) -> dict:
    """One program's split; `optimizer`: the part of its compute and DMA time that is the
    optimizer's ops (AdamW runs no collective), reported apart as `optimizer_s`. `pipelined`:
    the program's collectives run in tiles beside its compute (a prompt with `cc_tiles`), and
    the time they were busy off the critical path is `collective_hidden_s`."""
    hidden = max(0.0, cost.collective_active - cost.collective) if pipelined else 0.0
    return {"compute_s": cost.compute - optimizer.compute, "dma_s": cost.dma - optimizer.dma,
            "collective_exposed_s": cost.collective, "collective_hidden_s": hidden,
            "bubble_s": 0.0, "optimizer_s": optimizer.compute + optimizer.dma,
            "overhead_s": overhead}


def _tiles(plan: InferencePlan) -> dict:
    """`cc_tiles` where the prompt's collectives are pipelined (left out where none is)."""
    return {"cc_tiles": plan.spec.cc_tiles} if plan.prefill_tiled else {}


def estimate_infer(plan: InferencePlan, mode: str) -> dict:
    spec, lay, inst = plan.spec, plan.spec.layout, plan.inst
    mem = plan.check_memory()
    overhead = inst.costs.exec_overhead_s
    # host-side time of the forward over the prompt: a generation request's first token waits
    # for the request's start; a traced forward pass (an encoder's, or a decoder's mode=infer)
    # for its outputs' return to the host
    host = (inst.costs.generation_start_s if plan.cfg.causal and mode != "infer"
            else plan.output_bytes() / inst.costs.host_copy_bytes_per_s)
    ttft = plan.prefill.time + overhead + host
    out = {"mode": mode, "model": _model_info(plan.cfg),
           "parallel": {**lay.describe(), "sp": plan.prefill_shard.sp, **_tiles(plan)},
           "dtype": spec.prec.name, "matmul_dtype": spec.prec.matmul,
           "weights": spec.prec.layer_weight, "batch": spec.batch,
           "input_tokens": spec.input_len, "output_tokens": spec.output_len,
           "padded_input_tokens": plan.prefill_len, "ttft_s": ttft}
    if plan.decode_buckets:
        out.update(_generation(plan, ttft))
        # the mean decode step is the one step_time_s times: its parts add up to it
        step, fixed, flops = plan.decode_mean(), overhead, None
    else:
        out.update(_one_pass(plan, ttft, mode))
        step, fixed = plan.prefill, overhead + host
        flops = (plan.prefill_model_flops * lay.ranks, step.hardware_flops * lay.ranks)
    out.update(_ratios(inst, step, out["step_time_s"], flops, lay.ranks))
    out["breakdown"] = _breakdown(step, fixed,
                                  pipelined=step is plan.prefill and plan.prefill_tiled)
    out["memory"] = mem.as_dict()
    if spec.cc_tiles > 1 and not plan.prefill_tiled:
        why = ("its layers run no tensor-parallel collective (tp=1)" if lay.tp == 1 else
               f"the prompt's tiles would hold fewer than {TILE_ROWS} tokens each")
        plan.warnings += (f"cc_tiles={spec.cc_tiles} pipelines nothing here: {why}",)
    if plan.warnings:
        out["warnings"] = list(plan.warnings)
    return out


def _generation(plan: InferencePlan, ttft: float) -> dict:
    """The figures of a decode that generates tokens after its first."""
    spec, replicas = plan.spec, plan.spec.layout.dp
    tpot_mean = plan.tpot_mean()
    # the median token is what latency tables quote; time and throughput add up the mean
    e2e = ttft + (spec.output_len - 1) * tpot_mean
    return {"tpot_s": plan.tpot(), "tpot_mean_s": tpot_mean, "e2e_latency_s": e2e,
            "time_s": tpot_mean, "step_time_s": tpot_mean,
            "tokens_per_s": replicas * spec.batch / tpot_mean,
            "sequences_per_s": replicas * spec.batch / e2e,
            "decode_buckets": {str(k): v for k, v in sorted(plan.decode_buckets.items())}}


def _one_pass(plan: InferencePlan, ttft: float, mode: str) -> dict:
    """The figures of one forward pass over the prompt. A decode of one output token is that
    pass (the token is the first one): its request ends at the TTFT, its throughput counts
    the tokens it generates, and it has no time per output token after the first."""
    spec, replicas = plan.spec, plan.spec.layout.dp
    sequences = replicas * spec.batch / ttft
    if mode == "decode":
        return {"e2e_latency_s": ttft, "time_s": ttft, "step_time_s": ttft,
                "sequences_per_s": sequences, "tokens_per_s": sequences}
    return {"time_s": ttft, "step_time_s": ttft, "latency_s": ttft, "sequences_per_s": sequences,
            "tokens_per_s": replicas * spec.batch * spec.input_len / ttft}


def estimate_model(cfg: ModelConfig, inst: Instance, opts: dict, placement) -> dict:
    plan = _prepare(cfg, inst, opts, placement)
    if isinstance(plan, TrainingPlan):
        return estimate_train(plan)
    return estimate_infer(plan, opts["mode"])


# --- build_step ----------------------------------------------------------------------------------
def build_model_step(name: str, cfg: ModelConfig, inst: Instance, opts: dict, placement) -> StepPlan:
    plan = _prepare(cfg, inst, opts, placement)
    if isinstance(plan, TrainingPlan):
        spec, lay = plan.spec, plan.spec.layout
        stages = tuple((Execution("microbatch", plan.microbatch_program(s), spec.microbatches),
                        Execution("optimizer", _joined(plan.sync_program(s), plan.optimizer_program(s)), 1))
                       for s in range(lay.pp))
        return StepPlan(name, "train", lay, stages, spec.gbs, spec.gbs * spec.seq,
                        plan.check_memory())
    spec = plan.spec
    execs = [Execution("prefill", plan.prefill_program(), 1)]
    if opts["mode"] == "decode":
        execs += [Execution(f"decode@{kv}", plan.decode_program(kv), n)
                  for kv, n in sorted(plan.decode_buckets.items())]
    tokens = spec.batch * (spec.output_len if opts["mode"] == "decode" else spec.input_len)
    return StepPlan(name, opts["mode"], spec.layout, (tuple(execs),), spec.batch, tokens,
                    plan.check_memory())


def _joined(first: Program, second: Program) -> Program:
    return Program(ops=first.ops + second.ops, phase="optimizer")
