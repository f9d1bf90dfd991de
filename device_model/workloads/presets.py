"""Model shapes by name: the public configurations of the Llama, GPT-3 and BERT families.

Sources: Llama 2 paper (Touvron et al. 2023, table 1) and its `config.json` files; Llama 3 / 3.1
/ 3.3 model cards (Meta 2024: 3.1 and 3.3 share 3's shapes with a 128k context); GPT-3 paper (Brown et al. 2020, table 2.1) for 175B and the Neuron
NeMo-Megatron `gpt_23b` configuration; BERT paper (Devlin et al. 2018) for base and large.
RoBERTa (roberta-base/-large), DistilBERT (distilbert-base-uncased), ELECTRA
(google/electra-base-discriminator), ALBERT (albert-base-v2), Mistral-7B-Instruct-v0.2 and
CodeLlama-13b-hf: their Hugging Face `config.json` files. Not modelled: ALBERT's factorised
128-wide embedding and its sharing of one layer's weights across layers (each layer still reads
its weights, as a compiled graph does), DistilBERT's lack of token-type embeddings (a few KiB).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A transformer's hyper-parameters. `ffn` is the MLP's inner width (per gate for SwiGLU)."""
    name: str
    family: str                 # "llama" | "gpt" | "bert"
    hidden: int
    layers: int
    heads: int
    kv_heads: int               # < heads: grouped-query attention
    ffn: int
    vocab: int
    max_seq: int                # trained context (learned positions: the hard limit)
    default_seq: int            # sequence length used when the spec gives none
    mlp: str = "swiglu"         # "swiglu" (gate, up, down) | "gelu" (fc1, fc2)
    norm: str = "rms"           # "rms" | "layer"
    causal: bool = True
    bias: bool = False          # linear layers carry biases
    rope: bool = True           # rotary position embedding (else learned positions)
    tied_embeddings: bool = False
    dropout: bool = False       # training applies dropout (BERT pre-training does)

    @property
    def positions_limited(self) -> bool:
        """Learned position tables end at `max_seq`; rotary positions run past the trained
        context (with a warning: quality is not guaranteed there, but the run is possible)."""
        return not self.rope

    def check_length(self, tokens: int, what: str) -> str | None:
        """SpecError past a learned position table; a warning past a RoPE model's context."""
        if tokens <= self.max_seq:
            return None
        if self.positions_limited:
            raise SpecError(f"{what} is longer than {self.name} allows ({self.max_seq})")
        return (f"{what} is longer than {self.name}'s trained context ({self.max_seq}); "
                f"estimated anyway (RoPE positions extend, quality is not modelled)")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        h, d = self.hidden, self.head_dim
        attn = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h
        mlp = (3 if self.mlp == "swiglu" else 2) * h * self.ffn
        norms = (1 if self.norm == "rms" else 2) * 2 * h
        biases = ((self.heads + 2 * self.kv_heads) * d + h + self.ffn + h) if self.bias else 0
        return attn + mlp + norms + biases

    def embedding_params(self) -> int:
        positions = 0 if self.rope else self.max_seq * self.hidden
        types = 2 * self.hidden if self.family == "bert" else 0
        return self.vocab * self.hidden + positions + types

    def head_params(self) -> int:
        """Final norm, the BERT MLM transform, and an untied output projection."""
        h = self.hidden
        norm = (1 if self.norm == "rms" else 2) * h
        transform = h * h + h + 2 * h if self.family == "bert" else 0
        return norm + transform + (0 if self.tied_embeddings else self.vocab * h)

    def params(self) -> int:
        return self.layers * self.layer_params() + self.embedding_params() + self.head_params()


def _llama(name, hidden, layers, heads, kv, ffn, vocab, max_seq, default_seq):
    return ModelConfig(name, "llama", hidden, layers, heads, kv, ffn, vocab, max_seq, default_seq)


def _gpt(name, hidden, layers, heads, ffn, vocab=50257, max_seq=2048):
    return ModelConfig(name, "gpt", hidden, layers, heads, heads, ffn, vocab, max_seq, max_seq,
                       mlp="gelu", norm="layer", bias=True, rope=False, tied_embeddings=True)


def _bert(name, hidden, layers, heads, vocab=30522):
    return ModelConfig(name, "bert", hidden, layers, heads, heads, 4 * hidden, vocab, 512, 128,
                       mlp="gelu", norm="layer", causal=False, bias=True, rope=False,
                       tied_embeddings=True, dropout=True)


PRESETS: dict[str, ModelConfig] = {c.name: c for c in (
    _llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096, 4096),
    _llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096, 4096),
    _llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096, 4096),
    _llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 8192),
    _llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192, 8192),
    _llama("llama3.1-8b", 4096, 32, 32, 8, 14336, 128256, 131072, 8192),
    _llama("llama3.1-70b", 8192, 80, 64, 8, 28672, 128256, 131072, 8192),
    _llama("llama3.3-70b", 8192, 80, 64, 8, 28672, 128256, 131072, 8192),
    _llama("llama3.1-405b", 16384, 126, 128, 8, 53248, 128256, 131072, 8192),
    _gpt("gpt3-23b", 8192, 28, 64, 32768),
    _gpt("gpt3-175b", 12288, 96, 96, 49152),
    _bert("bert-base", 768, 12, 12),
    _bert("bert-large", 1024, 24, 16),
    # encoders of the same block as BERT, from their Hugging Face config.json files
    _bert("roberta-base", 768, 12, 12, vocab=50265),
    _bert("roberta-large", 1024, 24, 16, vocab=50265),
    _bert("distilbert-base", 768, 6, 12),
    _bert("electra-base", 768, 12, 12),
    _bert("albert-base", 768, 12, 12, vocab=30000),
    _llama("mistral-7b", 4096, 32, 32, 8, 14336, 32000, 32768, 8192),
    _llama("codellama-13b", 5120, 40, 40, 40, 13824, 32016, 16384, 4096),
)}


def get_preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown model {name!r}; allowed: {', '.join(PRESETS)}") from None


