"""What a simulated runtime executes: core sets, `TAG=WORKLOAD_SPEC@CORES` apps, the program of
one execution, its memory footprint, and the default application mix."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..core import Instance
from ..catalog.dtypes import get_dtype
from ..errors import SpecError
from ..program import CollectiveGroup, Program
from ..catalog.specs import MiB
from ..workloads import REGISTRY, Placement, build_step, resolve
from ..workloads.micro import COLLECTIVE_KINDS, place_ranks
from ..workloads.spec import Param, bind, parse_int, split_spec
from .layout import DEVICE_MEMORY

TAG_MAX = 255                      # neuron-monitor: NEURON_PROCESS_TAG up to 255 characters
RUNTIME_MEMORY_BYTES = 16 * MiB    # assumption: runtime bookkeeping per core
MODEL_CODE_BASE = 1 * MiB          # assumption: NEFF code size, fixed part
MODEL_CODE_PER_INSTR = 64          # assumption: bytes of NEFF code per instruction
DMA_BUFFER_PER_CORE = 1 * MiB      # neuron-tools.md 1.2 example: dma_buffers 1048576
DEFAULT_MODEL = "llama3-8b"
DEFAULT_TRAIN = "mode=train,seq=1024"                  # ~2 s to schedule one step on this machine
DEFAULT_SERVE = "mode=decode,batch=4,in=512,out=128"


def parse_cores(text: str, limit: int) -> tuple[int, ...]:
    """NEURON_RT_VISIBLE_CORES semantics: "3", "0-3", "4,5", "0-1,6-7"; ids below `limit`."""
    cores: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part, re.ASCII)
        if not m:
            raise SpecError(f"bad core list {text!r}; expected ids and ranges like 0-3 or 4,5")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo:
            raise SpecError(f"bad core range {part.strip()!r} in {text!r}: end before start")
        if hi >= limit:
            raise SpecError(f"core {hi} in {text!r} is out of range; allowed: 0-{limit - 1}")
        cores.extend(range(lo, hi + 1))
    if len(set(cores)) != len(cores):
        raise SpecError(f"core list {text!r} names a core twice")
    return tuple(cores)


def format_cores(cores: tuple[int, ...]) -> str:
    """Inverse of parse_cores, compact: (0,1,2,3,6) -> "0-3,6"."""
    out, run = [], []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


@dataclass(frozen=True, slots=True)
class AppSpec:
    tag: str
    workload: str
    cores: tuple[int, ...]


def parse_app(text: str, logical_cores: int) -> AppSpec:
    """`TAG=WORKLOAD_SPEC@CORES`, e.g. `train=matmul:m=4096,k=4096,n=4096@0-47`."""
    tag, eq, rest = text.partition("=")
    spec, at, cores = rest.rpartition("@")
    if not eq or not at or not tag.strip() or not spec.strip() or not cores.strip():
        raise SpecError(f"bad app {text!r}; expected TAG=WORKLOAD_SPEC@CORES, e.g. train=matmul:m=4096,k=4096,n=4096@0-7")
    tag = tag.strip()
    if len(tag) > TAG_MAX or not tag.isprintable():
        raise SpecError(f"app tag {tag[:40]!r} must be printable and at most {TAG_MAX} characters")
    resolve_app_workload(spec.strip())          # validates name and options now, not in the child
    return AppSpec(tag, spec.strip(), parse_cores(cores, logical_cores))


def check_disjoint(apps: list[AppSpec]) -> None:
    owner: dict[int, str] = {}
    for app in apps:
        for c in app.cores:
            if c in owner:
                raise SpecError(f"core {c} is given to both {owner[c]!r} and {app.tag!r}")
            owner[c] = app.tag
    tags = [a.tag for a in apps]
    dup = {t for t in tags if tags.count(t) > 1}
    if dup:
        raise SpecError(f"app tag {sorted(dup)[0]!r} is used twice")


# ------------------------------------------------------------------ built-in demo programs
TRANSFORMER_PARAMS = (
    Param("layers", parse_int, 2, help="transformer layers on each core"),
    Param("hidden", parse_int, 2048, help="hidden size"),
    Param("seq", parse_int, 2048, help="tokens per execution on each core"),
    Param("heads", parse_int, 16, help="attention heads"),
    Param("dtype", str, "bf16", choices=("bf16", "fp16", "fp8", "fp32")),
)
# layers one demo program holds (~20 operators each with its backward; a few seconds to build
# and schedule at this many): more is a typo, and the child building it would stall the start
DEMO_MAX_LAYERS = 1024
DEMO_WORKLOADS = {
    "demo-train": "a small data-parallel transformer training step (forward, backward, all-reduce, optimizer)",
    "demo-serve": "a small transformer forward pass served as an inference request",
}


def transformer_program(opts: dict, training: bool, group: CollectiveGroup | None) -> Program:
    h, s, dt, heads = opts["hidden"], opts["seq"], opts["dtype"], opts["heads"]
    p = Program()
    mms: list[tuple[int, int, int]] = []
    for layer in range(opts["layers"]):
        p.layernorm(s, h, dt, rms=True, name=f"l{layer}.norm1")
        mms.append((s, h, 3 * h))
        p.matmul(s, h, 3 * h, dt, name=f"l{layer}.qkv")
        p.matmul(s, h // heads, s, dt, batch=heads, weights=False, name=f"l{layer}.scores")
        p.softmax(s * heads, s, dt, causal=True, name=f"l{layer}.softmax")
        p.matmul(s, s, h // heads, dt, batch=heads, weights=False, name=f"l{layer}.context")
        mms.append((s, h, h))
        p.matmul(s, h, h, dt, name=f"l{layer}.out_proj")
        p.layernorm(s, h, dt, rms=True, name=f"l{layer}.norm2")
        mms.append((s, h, 4 * h))
        p.matmul(s, h, 4 * h, dt, name=f"l{layer}.mlp_up")
        p.activation("silu", s * 4 * h, dt, name=f"l{layer}.silu")
        mms.append((s, 4 * h, h))
        p.matmul(s, 4 * h, h, dt, name=f"l{layer}.mlp_down")
    if not training:
        return p
    p.phase = "backward"
    for m, k, n in reversed(mms):
        p.matmul(m, n, k, dt, weights=False, name="grad_input")     # dX = dY @ W^T
        p.matmul(k, m, n, dt, weights=False, name="grad_weight")    # dW = X^T @ dY
    params = sum(k * n for _, k, n in mms)
    if group is not None and group.ranks > 1:
        p.collective("all_reduce", int(params * get_dtype(dt).bytes), group, dtype=dt, name="grad_allreduce")
    p.phase = "optimizer"
    p.binary("mul", params, "fp32", name="adam_moments")
    p.binary("add", params, "fp32", name="adam_update")
    p.cast(params, "fp32", dt, name="cast_params")
    return p


@dataclass(frozen=True, slots=True)
class AppProgram:
    """One step of an app on each of its cores: executions (name, program, count) in order."""
    name: str
    kind: str                         # "train" | "serve" | "loop"
    executions: tuple[tuple[str, Program, int], ...]
    device_memory: dict[str, int]     # per core, DEVICE_MEMORY keys (model_code grows with the NEFF)
    host_tensors: int

    @property
    def program(self) -> Program:
        return self.executions[0][1]

    @property
    def executions_per_step(self) -> int:
        return sum(count for _, _, count in self.executions)


def resolve_app_workload(spec: str) -> tuple[str, dict]:
    name, raw = split_spec(spec)
    if name in DEMO_WORKLOADS:
        opts = bind(name, raw, TRANSFORMER_PARAMS)
        if opts["layers"] > DEMO_MAX_LAYERS:
            raise SpecError(f"{name}: layers={opts['layers']} is more than a demo program holds "
                            f"(at most {DEMO_MAX_LAYERS})")
        return name, opts
    allowed = sorted([*DEMO_WORKLOADS, "matmul", *COLLECTIVE_KINDS,
                      *(w.name for w in REGISTRY.values() if w.build is not None)])
    if name not in REGISTRY:   # the runtime's list: the registry's has no demo-train/demo-serve
        raise SpecError(f"unknown workload {name!r}; allowed: {', '.join(allowed)}")
    workload, opts = resolve(spec)
    if workload.name not in ("matmul", *COLLECTIVE_KINDS) and workload.build is None:
        raise SpecError(f"workload {name!r} cannot run in a runtime (no program); allowed: {', '.join(allowed)}")
    return workload.name, opts


def app_kind(name: str, mode: str | None = None) -> str:
    if mode is not None:
        return "train" if mode == "train" else "serve"
    if "train" in name:
        return "train"
    if "serve" in name or "infer" in name:
        return "serve"
    return "loop"


def build_app_program(spec: str, inst: Instance, cores: int) -> AppProgram:
    name, opts = resolve_app_workload(spec)
    group = place_ranks(inst, cores) if cores > 1 else None
    mode = None
    if name in DEMO_WORKLOADS:
        execs = ((name, transformer_program(opts, name == "demo-train", group), 1),)
    elif name == "matmul":
        prog = Program()
        prog.matmul(opts["m"], opts["k"], opts["n"], opts["dtype"], batch=opts["batch"])
        execs = ((name, prog, 1),)
    elif name in COLLECTIVE_KINDS:
        prog = Program()
        prog.collective(COLLECTIVE_KINDS[name], opts["bytes"], place_ranks(inst, max(cores, opts["ranks"])),
                        dtype=opts["dtype"])
        execs = ((name, prog, 1),)
    else:
        step, placement = _fitting_step(spec, inst, cores)
        mode = step.mode
        execs = tuple((e.name, e.program, e.count) for e in step.stages[0])
    kind = app_kind(name, mode)
    memory, host_tensors = program_memory(execs[0][1], kind, inst.lnc)
    model_memory = _workload_memory(name, opts, inst, placement) if mode is not None else None
    if model_memory is not None:
        memory = model_memory
    return AppProgram(name, kind, execs, memory, host_tensors)


def _fitting_step(spec: str, inst: Instance, cores: int):
    """The step with the least tensor parallelism whose memory fits, as a job would be sharded."""
    first_error = None
    for tp in (None, 2, 4, 8, 16, 32, 64):
        if tp is not None and (tp > cores or cores % tp):
            break
        placement = Placement(cores=cores, tp=tp)
        try:
            step = build_step(spec, inst, placement)
            name, opts = resolve_app_workload(spec)
            _workload_memory(name, opts, inst, placement)
            return step, placement
        except SpecError as e:
            if "does not fit" not in str(e):
                raise
            first_error = first_error or e
    raise first_error


def _workload_memory(name: str, opts: dict, inst: Instance, placement: Placement) -> dict[str, int] | None:
    """The workload library's per-core HBM plan (weights, optimizer, activations, KV cache)."""
    try:
        from ..workloads.estimate_model import _prepare
        from ..workloads.presets import PRESETS
        if name not in PRESETS:
            return None
        mem = _prepare(PRESETS[name], inst, opts, placement).check_memory()
    except (ImportError, AttributeError, TypeError):
        return None
    reserved = int(mem.reserved)
    return {"constants": int(mem.weights), "model_code": MODEL_CODE_BASE,
            "model_shared_scratchpad": reserved // 2, "runtime_memory": reserved // 4,
            "tensors": int(mem.gradients + mem.optimizer + mem.activations + mem.kv_cache)}


def program_memory(prog: Program, kind: str, lnc: int) -> tuple[dict[str, int], int]:
    """Per-logical-core device memory by category and host tensor bytes (a model, not a NEFF)."""
    weights = activations = largest = 0.0
    for op in prog.ops:
        if op.kind != "matmul" or op.phase != "forward":
            continue
        size = get_dtype(op.get("dtype")).bytes
        out = op.get("m") * op.get("n") * op.get("batch") * 2.0
        largest = max(largest, out)
        activations += out
        if op.get("weights"):
            weights += op.get("k") * op.get("n") * size
    tensors = activations if kind == "train" else 2 * largest
    if kind == "train":
        tensors += weights / max(get_dtype("bf16").bytes, 1) * 12     # fp32 master + Adam moments
    memory = {"constants": int(weights), "model_code": MODEL_CODE_BASE, "model_shared_scratchpad": int(largest),
              "runtime_memory": RUNTIME_MEMORY_BYTES, "tensors": int(math.ceil(tensors))}
    assert set(memory) == set(DEVICE_MEMORY)
    first = prog.ops[0] if prog.ops else None
    host_tensors = int(first.get("m", 0) * first.get("k", 0) * 2) if first is not None and first.kind == "matmul" else 0
    return memory, host_tensors


# ------------------------------------------------------------------ the default mix
def default_apps(inst: Instance) -> list[AppSpec]:
    """A representative instance: Llama training over three quarters of the cores and a Llama
    inference service on the rest; small demo transformers where no Llama preset is registered
    or where it does not fit the instance's cores (trn1.2xlarge: one core each)."""
    logical_cores = inst.logical_cores
    train_cores = tuple(range(max(1, logical_cores * 3 // 4)))
    serve_cores = tuple(range(len(train_cores), logical_cores))
    llama = (f"{DEFAULT_MODEL}:{DEFAULT_TRAIN}", f"{DEFAULT_MODEL}:{DEFAULT_SERVE}")
    demo = ("demo-train:layers=2,hidden=2048,seq=2048", "demo-serve:layers=2,hidden=2048,seq=512")
    preset = REGISTRY.get(DEFAULT_MODEL)
    use_llama = preset is not None and preset.build is not None and all(
        _fits(spec, inst, len(cores)) for spec, cores in zip(llama, (train_cores, serve_cores))
        if cores)
    train, serve = llama if use_llama else demo
    apps = [AppSpec("llama-train" if use_llama else "demo-train", train, train_cores)]
    if serve_cores:
        apps.append(AppSpec("llama-serve" if use_llama else "demo-serve", serve, serve_cores))
    return apps


def _fits(spec: str, inst: Instance, cores: int) -> bool:
    try:
        _fitting_step(spec, inst, cores)
    except SpecError as e:
        if "does not fit" not in str(e):
            raise
        return False
    return True
