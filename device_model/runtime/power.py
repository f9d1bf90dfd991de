"""Modelled power, energy, temperature and throttling of Trainium devices.

No published figure exists for any of this (trn2-arch.md gives TDP as a third-party estimate), so
every output is labelled *modelled*. The model is linear in engine activity:

    P = idle_watts * share + (tdp_watts - idle_watts) * sum_e w_e * active_e / physical_cores

where `share` is the fraction of the device's physical cores the caller accounts for and active_e
is engine-seconds per second (HBM traffic counts as an "engine" busy for bytes / per-core HBM
bandwidth). Temperature follows a first-order thermal model towards `ambient + R * P_device`, and
the throttle ratio is the share of time TensorE ran below full rate (dI/dt ramps) or the thermal
limit's cut, whichever is larger.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..catalog.specs import DeviceSpec
from .layout import ENGINES

# Share of dynamic power per fully-busy unit (assumption: TensorE dominates, sums to 1).
ACTIVITY_WEIGHTS = {"tensor": 0.50, "vector": 0.07, "scalar": 0.07, "gpsimd": 0.04, "dma": 0.07,
                    "hbm": 0.25}
ENGINE_WEIGHTS = np.array([ACTIVITY_WEIGHTS[e] for e in ENGINES])
THERMAL_TAU_S = 30.0            # assumption: heat-sink time constant
THROTTLE_TEMP_C = 95.0          # assumption: thermal throttling starts here
THROTTLE_SPAN_C = 10.0          # assumption: full cut (ratio 1) this far above the start


@dataclass(frozen=True, slots=True)
class PowerModel:
    device: DeviceSpec

    @property
    def dynamic_watts(self) -> float:
        return self.device.tdp_watts - self.device.idle_watts

    def energy(self, dt: float, engine_active_s: np.ndarray, hbm_bytes: np.ndarray,
               physical_cores: np.ndarray) -> np.ndarray:
        """Joules per device over `dt` seconds. Per device: engine-seconds (d, 5), HBM bytes (d,),
        and how many of its physical cores the caller accounts for (d,)."""
        dev = self.device
        share = np.asarray(physical_cores, float) / dev.physical_cores
        hbm_s = np.asarray(hbm_bytes, float) / (dev.hbm_bw / dev.physical_cores)
        activity = engine_active_s @ ENGINE_WEIGHTS + ACTIVITY_WEIGHTS["hbm"] * hbm_s
        return dev.idle_watts * share * dt + self.dynamic_watts * activity / dev.physical_cores

    def device_power(self, share_power: np.ndarray, share: np.ndarray) -> np.ndarray:
        """Whole-device power when the rest of the device (1 - share) idles."""
        return share_power + self.device.idle_watts * (1.0 - np.asarray(share, float))

    def steady_temperature(self, device_power: np.ndarray) -> np.ndarray:
        return self.device.ambient_c + self.device.thermal_resistance_c_per_w * device_power

    def step_temperature(self, temp: np.ndarray, device_power: np.ndarray, dt: float) -> np.ndarray:
        """First-order approach to the steady temperature over `dt` seconds."""
        k = 1.0 - math.exp(-max(dt, 0.0) / THERMAL_TAU_S)
        return temp + (self.steady_temperature(device_power) - temp) * k

    @staticmethod
    def thermal_throttle(temp: np.ndarray) -> np.ndarray:
        return np.clip((np.asarray(temp, float) - THROTTLE_TEMP_C) / THROTTLE_SPAN_C, 0.0, 1.0)
