"""Facts about the hardware taken from the device catalog, so that it stays behind monitor/.

A Report names its devices (``neuron_hardware_info.neuron_device_type``) but not their peak
rates; a sink that shows utilization of peak (the exporter's FLOPs ratio) looks them up here. A
source whose hardware info lacks the device names (Prometheus's) derives them here from the
instance type.
"""
from __future__ import annotations

from functools import cache
from types import MappingProxyType
from typing import Mapping

__all__ = ["hardware_of_instance_type", "hbm_bandwidth_of_instance_type",
           "peak_bf16_per_physical_core"]


@cache
def peak_bf16_per_physical_core() -> Mapping[str, float]:
    """Dense BF16 peak FLOP/s of one physical NeuronCore per `neuron_device_type`, from the device
    catalog (128x128 PEs x 2 FLOP x Tensor clock); "trainium" is Trainium1's older name."""
    from device_model.catalog.specs import DEVICES
    peaks = {d.device_type.lower(): d.peak_flops("bf16") for d in DEVICES.values()}
    peaks.setdefault("trainium", peaks.get("trainium1", 0.0))
    return MappingProxyType(peaks)


def hardware_of_instance_type(instance_type: str, cores_per_device: int | None) -> dict[str, object]:
    """The ``neuron_hardware_info`` fields that an EC2 instance type fixes — the device type and
    version, and with the NeuronCores per device also the LNC and the NeuronCore version — as
    neuron-monitor writes them, for sources that carry the type but not these (Prometheus's
    ``neuron_hardware_info`` has only the counts). Empty for a type the catalog does not know;
    no LNC where the count fits none of the chip's."""
    device = _device_of(instance_type)
    if device is None:
        return {}
    out: dict[str, object] = {"neuron_device_type": device.device_type,
                              "neuron_device_version": device.device_version}
    if cores_per_device and device.physical_cores % cores_per_device == 0:
        lnc = device.physical_cores // cores_per_device
        if lnc in device.lnc_options:
            out["neuroncore_version"] = device.core_version(lnc)
            if device.lnc_selectable:
                out["logical_neuroncore_config"] = lnc
    return out


def hbm_bandwidth_of_instance_type(instance_type: str) -> float | None:
    """One device's peak HBM bandwidth (bytes/s) on an EC2 instance type, from the device
    catalog: what ``hbm_bandwidth_utilization`` is a share of. None for a type it does not know."""
    device = _device_of(instance_type)
    return None if device is None else device.hbm_bw


def _device_of(instance_type: str):
    """The catalog's device of an instance type; None for a type it does not know."""
    from device_model.catalog.specs import get_instance
    from device_model.errors import SpecError
    try:
        return get_instance(instance_type).device
    except SpecError:
        return None
