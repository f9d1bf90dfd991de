"""HBM use per logical core: weights, gradients, optimizer state, activations, KV cache.

Activation bytes per layer are counted from the tensors a layer keeps for its backward pass
(Korthikanti et al. 2022, "Reducing activation recomputation", adapted to SwiGLU and GQA):
inputs of every matmul and norm, the attention probabilities unless recomputed, dropout masks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from .presets import ModelConfig
from .transformer import Precision, Shard

GiB = 1 << 30
RUNTIME_RESERVE_BYTES = 1 * GiB   # assumption: runtime scratchpad, collective buffers, NEFF code
CHECKPOINTS = ("none", "selective", "full")


@dataclass(frozen=True, slots=True)
class Memory:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    reserved: float
    capacity: float

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations
                + self.kv_cache + self.reserved)

    def as_dict(self) -> dict:
        """Byte counts as integers (the parts are computed in floats: per-element sizes, shares
        of a ZeRO-1 group); the total is the sum of the rounded parts, so that it adds up."""
        parts = {f"{k}_bytes": round(getattr(self, k)) for k in
                 ("weights", "gradients", "optimizer", "activations", "kv_cache", "reserved")}
        return {**parts, "total_bytes": sum(parts.values()), "capacity_bytes": round(self.capacity),
                "fits": self.total <= self.capacity}


def layer_activation_bytes(cfg: ModelConfig, sh: Shard, prec: Precision, batch: int, seq: int,
                           ckpt: str, flash: bool = False) -> float:
    """Bytes one layer keeps per micro-batch between its forward and backward pass."""
    a = prec.act_bytes
    tokens = batch * seq
    split = sh.tp if sh.sp else 1
    h, d = cfg.hidden, sh.head_dim
    if ckpt == "full":
        return tokens * h * a / split                      # the layer input only
    norm_region = 4 * tokens * h * a / split               # two norm inputs, two matmul inputs
    qkv = tokens * (sh.heads + 2 * sh.kv_heads) * d * a
    # selective checkpointing keeps the core attention's input (q, k, v) and recomputes its
    # output before the output projection's backward needs it
    context = 0.0 if ckpt == "selective" else tokens * sh.heads * d * a
    mlp = (3 if cfg.mlp == "swiglu" else 2) * tokens * sh.ffn * a
    masks = (2 * tokens * h / split) if cfg.dropout else 0.0
    probs = 0.0
    if ckpt == "none" and not flash:
        probs = batch * sh.heads * seq * seq * (2 * a + (1 if cfg.dropout else 0))
    return norm_region + qkv + context + mlp + masks + probs


def check_fits(name: str, mem: Memory, hint: str) -> None:
    if mem.total > mem.capacity:
        over = mem.total - mem.capacity
        # the parts this run has: inference keeps no gradients or optimizer state, training
        # no KV cache
        parts = ", ".join(f"{label} {value / GiB:.1f}" for label, value in (
            ("weights", mem.weights), ("gradients", mem.gradients), ("optimizer", mem.optimizer),
            ("activations", mem.activations), ("KV cache", mem.kv_cache),
            ("reserved", mem.reserved)) if value > 0 or label == "weights")
        raise SpecError(
            f"{name} does not fit: needs {mem.total / GiB:.1f} GiB per core ({parts}) but HBM "
            f"holds {mem.capacity / GiB:.1f} GiB; over by {_amount(over)} "
            f"({_share(over / mem.capacity)}); {hint}")


def _amount(nbytes: float) -> str:
    """A shortfall as it reads best: under a tenth of a GiB "0.0 GiB" says nothing."""
    if nbytes >= 0.1 * GiB:
        return f"{nbytes / GiB:.1f} GiB"
    return f"{max(1, round(nbytes / 2**20))} MiB"


def _share(ratio: float) -> str:
    return f"{ratio * 100:.0f}%" if ratio >= 0.01 else f"{ratio * 100:.1f}%"


def in_flight_microbatches(stage: int, pp: int, microbatches: int) -> int:
    """1F1B: stage s holds the activations of min(pp - s, m) micro-batches at its peak."""
    return max(1, min(pp - stage, microbatches))


