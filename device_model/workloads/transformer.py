"""Transformer layers as recipes: one rank's share of a decoder (Llama, GPT) or encoder (BERT)
layer under tensor parallelism, plus the embedding and the output head.

Tensor parallelism follows Megatron-LM: QKV and gate/up are column parallel, the output and down
projections row parallel, joined by one all-reduce each (or, with sequence parallelism, an
all-gather before and a reduce-scatter after, with norms and residuals on 1/tp of the tokens).
Backward mirrors them where the gradients need it, beside the matmuls that do not wait on them
(`Recipe.linear` with a `Join`). With tp > kv_heads the KV heads are replicated, as Neuron's
GQA sharding does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..catalog.dtypes import get_dtype
from ..errors import SpecError
from ..program import CollectiveGroup
from .presets import ModelConfig
from .recipe import Join, Recipe


@dataclass(frozen=True, slots=True)
class Precision:
    """What each tensor class is stored and computed in (bytes per element)."""
    name: str
    matmul: str               # TensorE operand dtype
    act: str                  # activations and elementwise math
    weight: str               # what the weights are stored in, which the matmuls read them at
    grad_bytes: float         # gradient buffer (FP32 accumulation under mixed precision)
    optimizer_bytes: float    # AdamW state per parameter: FP32 master copy (if any), m and v
    # weight-only quantization (inference): the layers' linear weights are stored in this dtype
    # and dequantized on the chip before their matmuls; norms, embedding and head keep `weight`
    quant: str = ""

    @property
    def act_bytes(self) -> float:
        return get_dtype(self.act).bytes

    @property
    def weight_bytes(self) -> float:
        """The weights the forward pass reads, per parameter."""
        return get_dtype(self.weight).bytes

    @property
    def layer_weight(self) -> str:
        """The dtype the layers' linear weights are stored in."""
        return self.quant or self.weight


PRECISIONS = ("fp32", "bf16", "fp8")
# weight storage an inference run may ask for (`weights=`): the matmul dtype's own, or a
# weight-only quantization narrower than it
WEIGHT_STORAGE = ("int8", "fp8", "bf16")


def precision(name: str, training: bool, autocast: bool = False) -> Precision:
    """`autocast`: neuronx-cc's default for an FP32 model ("by default, the Neuron Compiler will
    automatically cast FP32 matrix multiplication operations to BF16; the remaining operations
    are performed in the data type specified by the model": neuronx-cc mixed-precision guide).
    Gradients, optimizer state and elementwise work stay FP32, and so do training's weights
    (cast as each matmul loads them). Inference stores the weights BF16: a traced model's
    weights are constants of its graph (torch-neuronx `trace` inlines them by default), so
    the compiler folds the cast into them."""
    if name == "fp32":
        weight = "bf16" if autocast and not training else "fp32"
        return Precision("fp32", "bf16" if autocast else "fp32", "fp32", weight, 4, 8)
    if name == "bf16":
        return Precision("bf16", "bf16", "bf16", "bf16", 4, 12)
    if name == "fp8":     # FP8 matmuls; training keeps BF16 weights and casts per matmul
        return Precision("fp8", "fp8", "bf16", "bf16" if training else "fp8", 4, 12)
    raise SpecError(f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}")


def quantized(prec: Precision, storage: str) -> Precision:
    """`prec` with its layers' linear weights stored as `storage` (transformers-neuronx's and
    NxD Inference's weight-only quantization: int8 or FP8 weights with per-channel scales,
    BF16 matmuls). Storage as wide as the weights already are is no quantization."""
    if not storage or get_dtype(storage).bytes >= prec.weight_bytes:
        if storage and storage != prec.weight:
            raise SpecError(f"weights={storage} is not narrower than the {prec.weight} weights "
                            f"dtype={prec.name} stores; allowed: a narrower type, or {prec.weight}")
        return prec
    return replace(prec, quant=storage)


@dataclass(frozen=True, slots=True)
class Shard:
    """One tensor-parallel rank's slice of the model."""
    tp: int
    sp: bool                  # sequence parallel: norms/residuals on tokens/tp
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int


def padded_heads(cfg: ModelConfig, tp: int) -> tuple[int, int]:
    """Query and KV head counts as inference shards them: NxD Inference and transformers-neuronx
    pad the query heads with zero heads up to a multiple of tp (and, for multi-head attention,
    the K and V heads alike), so every rank computes and reads as many heads as the largest
    share. The zero heads cost what real ones do: TensorE work, weight reads and KV cache."""
    heads = -(-cfg.heads // tp) * tp
    kv = heads if cfg.kv_heads == cfg.heads else cfg.kv_heads
    return heads, kv


def make_shard(cfg: ModelConfig, tp: int, sp: bool, *, pad: bool = False) -> Shard:
    """One rank's share. `pad`: heads that tp does not divide are padded (inference);
    otherwise (training: NxD's parallel layers need an even split) it is an error."""
    heads, kv_heads = padded_heads(cfg, tp) if pad else (cfg.heads, cfg.kv_heads)
    if heads % tp:
        raise SpecError(f"{cfg.name}: {cfg.heads} attention heads are not divisible by tp={tp}")
    if kv_heads % tp == 0:
        kv = kv_heads // tp
    elif tp % kv_heads == 0:
        kv = 1                                    # replicated KV heads
    else:
        raise SpecError(f"{cfg.name}: {cfg.kv_heads} KV heads and tp={tp} do not divide each other")
    if cfg.ffn % tp:
        raise SpecError(f"{cfg.name}: FFN width {cfg.ffn} is not divisible by tp={tp}")
    return Shard(tp, sp and tp > 1, heads // tp, kv, cfg.head_dim, cfg.ffn // tp,
                 math.ceil(cfg.vocab / tp))


def model_shares(cfg: ModelConfig, sh: Shard) -> tuple[float, float]:
    """The model's part of a rank's attention work (its query heads: zero heads padded in are
    not) and of its QKV projection (KV heads replicated over tp > kv_heads ranks are computed
    on each, once for the model): what MFU counts, as it does not grow with tp."""
    heads = cfg.heads / (sh.tp * sh.heads)
    qkv = (cfg.heads + 2 * cfg.kv_heads) / (sh.tp * (sh.heads + 2 * sh.kv_heads))
    return heads, qkv


def shard_layer_params(cfg: ModelConfig, sh: Shard) -> int:
    """Parameters one rank holds for one layer (norms replicated, KV heads maybe replicated)."""
    h, d = cfg.hidden, sh.head_dim
    linear, _ = shard_linear_params(cfg, sh)
    norms = (1 if cfg.norm == "rms" else 2) * 2 * h
    biases = ((sh.heads + 2 * sh.kv_heads) * d + sh.ffn + 2 * h) if cfg.bias else 0
    return linear + norms + biases


def shard_linear_params(cfg: ModelConfig, sh: Shard) -> tuple[int, int]:
    """One rank's linear weights of one layer (what weight-only quantization stores narrower),
    and their output channels (one scale each)."""
    h, d = cfg.hidden, sh.head_dim
    qkv = (sh.heads + 2 * sh.kv_heads) * d
    up = (2 if cfg.mlp == "swiglu" else 1) * sh.ffn
    return h * qkv + sh.heads * d * h + h * up + sh.ffn * h, qkv + h + up + h


def _join(tokens: int, cfg: ModelConfig, sh: Shard, group: CollectiveGroup,
          prec: Precision) -> Join:
    """How a column-parallel linear of this shard meets its TP group."""
    return Join(group, int(tokens * cfg.hidden * prec.act_bytes), sh.sp)


def _row_join(r: Recipe, name: str, join: Join) -> None:
    """The collective after a row-parallel linear: a reduce-scatter (SP; its backward gathers
    the gradient) or an all-reduce (whose gradient passes through)."""
    kind = "reduce_scatter" if join.sp else "all_reduce"
    r.collective(f"{name}.{kind}", kind, join.nbytes, join.group, mirror=join.sp)


def layer_recipe(cfg: ModelConfig, sh: Shard, prec: Precision, batch: int, q_len: int,
                 kv_len: int, group: CollectiveGroup, *, training: bool,
                 cache_write: bool = False, flash: bool = False,
                 fused_softmax: bool = False) -> Recipe:
    """One layer for `batch` sequences of `q_len` new tokens attending to `kv_len` positions.
    `flash`: fused attention (no score matrix in HBM); else scores, softmax and context as
    separate ops, as XLA emits them and as decode's matrix-vector kernels run, the softmax's
    backward one op if `fused_softmax`."""
    r = Recipe.of(prec, weight=prec.layer_weight)
    h, d = cfg.hidden, sh.head_dim
    tokens = batch * q_len
    rows = math.ceil(tokens / sh.tp) if sh.sp else tokens       # norm / residual rows
    drop = cfg.dropout and training
    qkv = (sh.heads + 2 * sh.kv_heads) * d
    rms = cfg.norm == "rms"
    heads_share, qkv_share = model_shares(cfg, sh)

    join = _join(tokens, cfg, sh, group, prec)
    r.norm("attn_norm", rows, h, rms)
    r.linear("qkv", tokens, h, qkv, join, model_share=qkv_share)
    if cfg.bias:
        r.binary("qkv_bias", "add", tokens * qkv, grads=0)
    if cfg.rope:
        rot = tokens * (sh.heads + sh.kv_heads) * d
        r.binary("rope_cos", "mul", rot)
        r.binary("rope_sin", "mul", rot)
        r.binary("rope_add", "add", rot, grads=0)
    if cache_write:
        r.store("kv_cache_write", int(tokens * 2 * sh.kv_heads * d * prec.act_bytes))
    if flash:
        # NxD's selective checkpointing wraps the core attention: with the fused kernel its
        # forward runs again before the backward (to rebuild the output and row statistics)
        r.tag = "attn"
        r.attention("attention", batch * sh.kv_heads, sh.heads // sh.kv_heads * q_len, kv_len, d,
                    cfg.causal and q_len > 1, model_share=heads_share)
        r.tag = ""
    else:
        # decode reads K and V from the cache, stored [positions, batch, KV heads, head_dim]:
        # one position's batch x KV heads x head_dim per run
        run = batch * sh.kv_heads * d * int(prec.act_bytes) if cache_write and q_len == 1 else 0
        _unfused_attention(r, cfg, sh, batch, q_len, kv_len, drop, run, fused_softmax,
                           heads_share)
    r.linear("attn_out", tokens, sh.heads * d, h, model_share=heads_share)
    _row_join(r, "attn", join)
    if drop:
        r.binary("attn_out_dropout", "mul", rows * h)
    r.binary("attn_residual", "add", rows * h)
    r.norm("mlp_norm", rows, h, rms)
    if cfg.mlp == "swiglu":
        r.linear("gate_up", tokens, h, 2 * sh.ffn, join)
        r.activation("silu", "silu", tokens * sh.ffn)
        r.binary("gate_mul", "mul", tokens * sh.ffn, grads=2)
    else:
        r.linear("fc1", tokens, h, sh.ffn, join)
        r.activation("gelu", "gelu", tokens * sh.ffn)
    r.linear("down" if cfg.mlp == "swiglu" else "fc2", tokens, sh.ffn, h)
    _row_join(r, "mlp", join)
    if drop:
        r.binary("mlp_dropout", "mul", rows * h)
    r.binary("mlp_residual", "add", rows * h)
    return r


def embedding_recipe(cfg: ModelConfig, sh: Shard, prec: Precision, tokens: int,
                     group: CollectiveGroup, *, training: bool) -> Recipe:
    """Vocab-parallel embedding: each rank gathers its rows, then the partial sums are joined."""
    r = Recipe.of(prec)
    h = cfg.hidden
    r.embedding("embed", tokens, h)
    _row_join(r, "embed", _join(tokens, cfg, sh, group, prec))
    rows = math.ceil(tokens / sh.tp) if sh.sp else tokens
    if not cfg.rope:
        r.binary("position_add", "add", rows * h, grads=0)
    if cfg.family == "bert":
        r.binary("type_add", "add", rows * h, grads=0)
        r.norm("embed_norm", rows, h, False)
    if cfg.dropout and training:
        r.binary("embed_dropout", "mul", rows * h)
    return r


# labels of a sequence classifier (the GLUE pair tasks' two, MRPC's among them); a third label
# adds one column to a [batch, hidden] matmul
CLASSIFIER_LABELS = 2


def classifier_recipe(cfg: ModelConfig, prec: Precision, batch: int) -> Recipe:
    """An encoder's sequence classification head (`AutoModelForSequenceClassification`): the
    pooler (a dense layer and tanh on each sequence's first token) and a linear layer to the
    labels, replicated on every rank as small as it is."""
    r = Recipe.of(prec)
    h = cfg.hidden
    r.linear("pooler", batch, h, h)
    r.activation("pooler_tanh", "tanh", batch * h)
    r.linear("classifier", batch, h, CLASSIFIER_LABELS)
    return r


def head_recipe(cfg: ModelConfig, sh: Shard, prec: Precision, tokens: int,
                group: CollectiveGroup, *, training: bool) -> Recipe:
    """Final norm and vocab-parallel output projection; training adds the cross-entropy loss
    (softmax over the vocab shard, joined by small all-reduces of max and sum); inference
    picks the next token (argmax over the shard, then an all-gather of the candidates)."""
    r = Recipe.of(prec)
    h = cfg.hidden
    rows = math.ceil(tokens / sh.tp) if sh.sp else tokens
    r.norm("final_norm", rows, h, cfg.norm == "rms")
    join = _join(tokens, cfg, sh, group, prec)
    bert = cfg.family == "bert"
    if bert:
        # the replicated MLM transform sits between the gather and the vocab-parallel linear:
        # the gather stands alone, and its reduce-scatter in backward joins the gradients
        if sh.sp:
            r.collective("head.all_gather", "all_gather", join.nbytes, group)
        r.linear("mlm_dense", tokens, h, h)
        r.activation("mlm_gelu", "gelu", tokens * h)
        r.norm("mlm_norm", tokens, h, False)
    r.linear("lm_head", tokens, h, sh.vocab, None if bert else join)
    if training:
        r.softmax("cross_entropy", tokens, sh.vocab, False)
        r.collective("loss.all_reduce", "all_reduce", tokens * 8, group)
    else:
        r.reduce("argmax", tokens, sh.vocab)
        r.collective("sample.all_gather", "all_gather", tokens * 8 * group.ranks, group)
    return r



def _unfused_attention(r: Recipe, cfg: ModelConfig, sh: Shard, batch: int, q_len: int,
                       kv_len: int, drop: bool, cache_run: int = 0,
                       fused_softmax: bool = False, heads_share: float = 1.0) -> None:
    """Scores, softmax, dropout and context as separate ops (what selective checkpointing
    recomputes). Query heads sharing a KV head are stacked as rows (GQA)."""
    d, group_q = sh.head_dim, sh.heads // sh.kv_heads
    r.tag = "attn"
    r.bmm("scores", batch * sh.kv_heads, group_q * q_len, d, kv_len, cache_run, heads_share)
    r.softmax("softmax", batch * sh.heads * q_len, kv_len, cfg.causal and q_len > 1,
              fused=fused_softmax)
    if drop:
        r.binary("attn_dropout", "mul", batch * sh.heads * q_len * kv_len)
    r.bmm("context", batch * sh.kv_heads, group_q * q_len, kv_len, d, cache_run, heads_share)
    r.tag = ""
