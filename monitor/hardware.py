"""Facts about the hardware that sinks need beside the Report, taken from the device catalog.

A Report names its devices (``neuron_hardware_info.neuron_device_type``) but not their peak
rates; a sink that shows utilization of peak (the exporter's FLOPs ratio) looks them up here, so
the chip model's catalog stays behind monitor/.
"""
from __future__ import annotations

from functools import cache
from types import MappingProxyType
from typing import Mapping

__all__ = ["peak_bf16_per_physical_core"]


@cache
def peak_bf16_per_physical_core() -> Mapping[str, float]:
    """Dense BF16 peak FLOP/s of one physical NeuronCore per `neuron_device_type`, from the device
    catalog (128x128 PEs x 2 FLOP x Tensor clock); "trainium" is Trainium1's older name."""
    from device_model.catalog.specs import DEVICES
    peaks = {d.device_type.lower(): d.peak_flops("bf16") for d in DEVICES.values()}
    peaks.setdefault("trainium", peaks.get("trainium1", 0.0))
    return MappingProxyType(peaks)
