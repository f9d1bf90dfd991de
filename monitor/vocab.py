"""The neuron-monitor schema's vocabulary: the one place its names are spelled out.

The Report parser, the collector, the exporters' metric table and neuron-top all import these
tuples, so a name added here (a sixth engine, a new error kind) reaches every sink at once. The
order is the schema's own (neuron-tools.md §1.2), which is also the order the sinks show them in.

The chip model writes counter files with its own copy of these lists (its binary layout);
a test keeps the two in agreement.
"""
from __future__ import annotations

__all__ = ["RUNTIME_GROUPS", "SYSTEM_GROUPS", "AWS_RUNTIME_GROUPS", "AWS_SYSTEM_GROUPS",
           "RENAMED_GROUPS", "ENGINES", "ENGINE_LABELS", "DMA_QUEUES", "ERROR_KINDS", "EXEC_STATUS",
           "PERCENTILES", "PERCENT_POINTS", "HOST_MEMORY", "CORE_MEMORY", "ECC_KINDS", "UNITS"]

# The metric groups: the keys of each neuron_runtime_data[].report and of system_data, which are
# also the config's metric "type"s (neuron-tools.md §1.1). AWS's neuron-monitor writes the first
# four and three; the last of each is the chip model's own (engine and HBM counters).
RUNTIME_GROUPS = ("neuroncore_counters", "execution_stats", "memory_used",
                  "neuron_runtime_vcpu_usage", "neuroncore_engine_counters")
SYSTEM_GROUPS = ("neuron_hw_counters", "vcpu_usage", "memory_info", "neuron_device_counters")
AWS_RUNTIME_GROUPS = RUNTIME_GROUPS[:4]
AWS_SYSTEM_GROUPS = SYSTEM_GROUPS[:3]
RENAMED_GROUPS = {"inference_stats": "execution_stats"}   # pre-2.5 names, read and not written

# neuroncore_engine_counters: engine utilization, one entry per engine of a NeuronCore.
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
ENGINE_LABELS = {"tensor": "Tensor", "vector": "Vector", "scalar": "Scalar", "gpsimd": "GpSimd",
                 "dma": "DMA"}
DMA_QUEUES = ("input", "output", "weight", "collective")     # dma_bytes, by purpose

# execution_stats: error_summary and execution_summary keys, latency percentiles.
ERROR_KINDS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
EXEC_STATUS = ("completed", "completed_with_err", "completed_with_num_err", "timed_out",
               "incorrect_input", "failed_to_queue")
PERCENTILES = ("p0", "p1", "p25", "p50", "p75", "p99", "p100")
PERCENT_POINTS = (0.0, 1.0, 25.0, 50.0, 75.0, 99.0, 100.0)   # the percentiles as numbers

# memory_used: usage_breakdown keys of host memory and of each NeuronCore's device memory.
HOST_MEMORY = ("application_memory", "constants", "dma_buffers", "tensors")
CORE_MEMORY = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")

# neuron_hw_counters: the ECC event counters of each device.
ECC_KINDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected",
             "sram_ecc_uncorrected")

# The units a sink may name (the metric table's `unit`): base units and counted things. The JSON
# schema's percentages (0..100) become ratios at the sinks' edge, so "percent" is not one of them.
UNITS = ("seconds", "bytes", "ratio", "FLOP", "watts", "joules", "celsius", "boolean",
         "executions", "errors", "events", "reports", "vCPUs", "series")
