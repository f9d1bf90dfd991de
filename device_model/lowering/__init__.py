"""Lowering: an operator of a Program becomes per-lane instruction stages with vectorised costs
(matmul on TensorE, vector/scalar operators, fused attention, DMA transfers)."""
