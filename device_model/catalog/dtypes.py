"""Data types the chip model understands: storage size and TensorE speed relative to BF16."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    bytes: float          # storage bytes per element (MX formats carry a shared scale: fractional)
    kind: str             # "fp32" | "bf16" | "fp8" | "mx" | "int": which TensorE rate rule applies
    # Profiler `adjusted_*flops` normalise to the BF16 peak (P1): FP32 x4, FP8 x0.5 on Trn2/3, MX x0.25.


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", 4, "fp32"),
    "tf32": DType("tf32", 4, "bf16"),   # N8': TF32 runs at the BF16 rate
    "bf16": DType("bf16", 2, "bf16"),
    "fp16": DType("fp16", 2, "bf16"),
    "fp8": DType("fp8", 1, "fp8"),
    "mxfp8": DType("mxfp8", 1 + 1 / 32, "mx"),   # N3: one shared 8-bit scale per 32 elements
    "mxfp4": DType("mxfp4", 0.5 + 1 / 32, "mx"),
    # weight storage only (weight-only quantization): dequantized to the matmul dtype on the chip
    "int8": DType("int8", 1, "int"),
}


def get_dtype(name: str) -> DType:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        from ..errors import SpecError
        raise SpecError(f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}") from None
