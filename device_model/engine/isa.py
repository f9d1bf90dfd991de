"""Engines, instruction lanes, opcodes and DMA queue types of one physical NeuronCore.

A *lane* is one in-order instruction queue (N2: each engine has its own sequencer). TensorE has two
rows in AWS's profiler, `TensorE` (LoadStationary) and `TensorMatrixE` (MultiplyMoving); both count
as the tensor engine. DMA transfers of all queues share one lane per core: the 16 DMA engines serve
their queues round-robin, so the queues share one bandwidth (N5).
"""
from __future__ import annotations

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync", "dma", "collective")
E_TENSOR, E_VECTOR, E_SCALAR, E_GPSIMD, E_SYNC, E_DMA, E_CC = range(len(ENGINES))

# lane name, engine index, profiler row name (neuron-tools.md §4.4)
LANES = (
    ("pe_ls", E_TENSOR, "TensorE"),
    ("pe_mm", E_TENSOR, "TensorMatrixE"),
    ("act", E_SCALAR, "ScalarE"),
    ("dve", E_VECTOR, "VectorE"),
    ("pool", E_GPSIMD, "GpSimdE"),
    ("sp", E_SYNC, "SyncE"),
    ("dma", E_DMA, "DMA"),
    ("cc", E_CC, "CC-core"),
)
LANE_ENGINE = tuple(engine for _, engine, _ in LANES)
LANE_ROW = tuple(row for _, _, row in LANES)
L_PE_LS, L_PE_MM, L_ACT, L_DVE, L_POOL, L_SP, L_DMA, L_CC = range(len(LANES))
COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd")

# DMA queue types (Parquet DmaPacket.queue_type, simplified) and the profiler row each maps to.
QUEUES = ("input", "output", "weight", "collective")
Q_INPUT, Q_OUTPUT, Q_WEIGHT, Q_CC = range(len(QUEUES))
QUEUE_ROWS = ("qSyncIO0", "qSyncIO1", "qSyncPIO0", "qCollective0")
Q_NONE = 255

OPCODES = (
    "MATMUL", "LOAD_STATIONARY", "TRANSPOSE", "ACTIVATE", "ACTIVATE_REDUCE", "TENSOR_TENSOR",
    "TENSOR_SCALAR", "TENSOR_REDUCE", "BN_STATS", "BN_AGGR", "RECIPROCAL", "TENSOR_COPY",
    "AFFINE_SELECT", "IOTA", "GATHER", "PARTITION_REDUCE", "DMA_LOAD", "DMA_STORE", "DMA_TRANSPOSE",
    "ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "SEND_RECV",
)
OP = {name: i for i, name in enumerate(OPCODES)}
