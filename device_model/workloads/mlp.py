"""A plain MLP (blocks of fc1, GELU, fc2 with biases), data parallel over the cores: a small
workload whose every op is visible, for quick checks of the engines and the optimizer."""
from __future__ import annotations

from ..core import Instance
from ..errors import SpecError
from ..program import Program
from ..catalog.specs import check_dtype
from .cost import ZERO, measure
from .memory import RUNTIME_RESERVE_BYTES, Memory, check_fits
from .parallel import resolve_layout
from .recipe import Recipe, emit_backward, emit_forward
from .spec import Param, parse_int
from .transformer import PRECISIONS, precision

# blocks one program may hold: every block is 13 operators (forward and backward), and an
# operator costs the builder and the scheduler about 0.2 ms and 5 KB of Python objects whatever
# its size, so 4096 blocks take about 10 s (an assumption about the machine, like limits.py's)
MAX_BLOCKS = 4096

MLP_PARAMS = (
    Param("hidden", parse_int, 4096, help="model width"),
    Param("ffn", parse_int, 0, help="inner width (default 4*hidden)"),
    Param("layers", parse_int, 4, help="blocks"),
    Param("batch", parse_int, 1024, help="samples per core per step"),
    Param("mode", str, "train", choices=("train", "infer")),
    Param("dtype", str, "bf16", choices=PRECISIONS),
)


def mlp_program(o: dict, dp_group) -> tuple[Program, int]:
    """The step's forward, backward and gradient all-reduce, and the parameter count."""
    prec = precision(o["dtype"], o["mode"] == "train")
    h, f, b = o["hidden"], o["ffn"] or 4 * o["hidden"], o["batch"]
    r = Recipe.of(prec)
    for i in range(o["layers"]):
        r.linear(f"block{i}.fc1", b, h, f)
        r.binary(f"block{i}.fc1_bias", "add", b * f, grads=0)
        r.activation(f"block{i}.gelu", "gelu", b * f)
        r.linear(f"block{i}.fc2", b, f, h)
        r.binary(f"block{i}.fc2_bias", "add", b * h, grads=0)
    params = o["layers"] * (2 * h * f + f + h)
    p = Program()
    emit_forward(p, r)
    if o["mode"] == "train":
        p.phase = "backward"
        emit_backward(p, r)
        if dp_group.ranks > 1:
            p.collective("all_reduce", params * 4, dp_group, dtype="fp32", name="dp.all_reduce")
    return p, params


def optimizer_program(params: int) -> Program:
    """AdamW over the parameters, unfused: an execution of its own after the step's, as the
    model workloads' optimizer (its loads read the gradients the backward stores)."""
    p = Program(phase="optimizer")
    for func in ("mul", "add", "add", "div", "sub"):
        p.binary(func, params, "fp32", name=f"adamw.{func}")
    p.activation("sqrt", params, "fp32", name="adamw.sqrt")
    return p


def estimate_mlp(inst: Instance, o: dict, placement) -> dict:
    from .estimate_model import _breakdown, _ratios, fp8_warning
    check_dtype(inst.spec, o["dtype"])
    if placement.tp not in (None, 1) or placement.pp not in (None, 1):
        raise SpecError("mlp runs data parallel only; drop --tp/--pp")
    if o["layers"] > MAX_BLOCKS:
        raise SpecError(f"mlp: layers={o['layers']} is more blocks than one program holds "
                        f"(at most {MAX_BLOCKS})")
    # default: one core a node, or the data-parallel degree asked for
    cores = placement.cores or placement.dp or placement.nodes
    lay = resolve_layout(inst, placement.nodes, cores, 1, 1, placement.dp, heads=1,
                         training=True)
    prog, params = mlp_program(o, lay.dp_group)
    train = o["mode"] == "train"
    cost = measure(inst, prog)
    adamw = measure(inst, optimizer_program(params)) if train else ZERO
    executions = 2 if train else 1
    overhead = executions * inst.costs.exec_overhead_s
    t = cost.time + adamw.time + overhead
    prec = precision(o["dtype"], train)
    cap = inst.device.hbm_bytes / inst.device.logical_cores(inst.lnc)
    # training keeps every block's activations for the backward pass; inference one block's
    acts = o["batch"] * (o["ffn"] or 4 * o["hidden"]) * 3 * prec.act_bytes \
        * (o["layers"] if train else 1)
    mem = Memory(params * prec.weight_bytes, params * prec.grad_bytes if train else 0.0,
                 params * prec.optimizer_bytes if train else 0.0, acts, 0.0,
                 RUNTIME_RESERVE_BYTES, cap)
    check_fits("mlp", mem, "try a smaller hidden, layers or batch")
    samples = o["batch"] * lay.dp
    return {"mode": o["mode"], "parallel": lay.describe(), "dtype": prec.name, "params": params,
            "time_s": t, "step_time_s": t, "samples_per_s": samples / t,
            **_ratios(inst, cost + adamw, t, None, lay.ranks),
            "breakdown": _breakdown(cost + adamw, overhead, optimizer=adamw),
            "memory": mem.as_dict(),
            **({"warnings": list(warned)} if (warned := fp8_warning(inst, o["dtype"])) else {})}

