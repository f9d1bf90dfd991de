"""Fault injection: ECC events, numerical errors, timeouts, at given times or rates, seeded.

Syntax of one fault (``neuron-sim start --inject``; docs/runtime.md)::

    KIND@WHEN[,key=value...]
    WHEN  = TIME                 once, at simulated time TIME (30s, 1.5m, 250ms, 2h; bare = s)
          | every=TIME           periodically, first at TIME
          | rate=R[/exec|/s|/m|/h]  at random: probability per execution (/exec) or a Poisson
                                    rate in simulated time; default /exec for execution faults,
                                    /s for ECC faults
    keys  = app=TAG (only that app's runtime), device=N (that device), count=N (events each time)

e.g. ``mem_ecc_uncorrected@30s``, ``numerical@rate=0.01``, ``sram_ecc_corrected@rate=2/m,device=3``.
Uncorrected ECC errors also fail the execution that meets them (hardware error).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from .layout import ECC_KINDS

ECC_FAULTS = ECC_KINDS  # the counter layout's ECC axis, in its order
# kind -> (execution status, error_summary key) for faults that fail an execution
EXEC_EFFECTS = {
    "mem_ecc_uncorrected": ("completed_with_err", "hardware"),
    "sram_ecc_uncorrected": ("completed_with_err", "hardware"),
    "numerical": ("completed_with_num_err", "numerical"),
    "timeout": ("timed_out", "transient"),
    "incorrect_input": ("incorrect_input", "model"),
    "failed_to_queue": ("failed_to_queue", "runtime"),
}
FAULT_KINDS = ECC_FAULTS + tuple(k for k in EXEC_EFFECTS if k not in ECC_FAULTS)
# bounds of an event: every failed execution is queued one by one, and an ECC counter is a
# 64-bit counter the collector reads as such (a count near 2**63 made it unreadable for good);
# a period under a millisecond is thousands of events per tick, each drawn on its own
MAX_FAILED_EXECUTIONS = 1000
MAX_ECC_EVENTS = 1_000_000_000
MIN_FAULT_PERIOD_S = 1e-3
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_RATE_UNITS = {"exec": None, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str, what: str = "time") -> float:
    """'30s', '1.5m', '250ms', '2h' or bare seconds -> seconds (non-negative, finite)."""
    t = text.strip().lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if t.endswith(unit):
            number, scale = t[: -len(unit)], _UNITS[unit]
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise SpecError(f"bad {what} {text!r}; expected a number with unit ms, s, m or h (e.g. 30s)") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"bad {what} {text!r}; must be a non-negative duration")
    return value


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: str
    at: float | None = None          # simulated seconds (once, or first of `every`)
    every: float | None = None
    rate: float | None = None        # per execution (per_exec) or per simulated second
    per_exec: bool = False
    app: str | None = None
    device: int | None = None
    count: int = 1
    text: str = ""


def parse_fault(text: str) -> FaultSpec:
    kind, at_sign, rest = text.strip().partition("@")
    kind = kind.strip().lower()
    if kind not in FAULT_KINDS:
        raise SpecError(f"unknown fault {kind!r} in {text!r}; allowed: {', '.join(FAULT_KINDS)}")
    if not at_sign or not rest.strip():
        raise SpecError(f"fault {text!r} needs @TIME, @every=TIME or @rate=R (e.g. {kind}@30s)")
    when, *options = [p.strip() for p in rest.split(",")]
    kw: dict = {"kind": kind, "text": text.strip()}
    if when.startswith("rate="):
        kw.update(_parse_rate(kind, when[5:], text))
    elif when.startswith("every="):
        kw["every"] = parse_duration(when[6:], "fault period")
        if kw["every"] < MIN_FAULT_PERIOD_S:
            raise SpecError(f"fault period in {text!r} must be at least 1ms")
        kw["at"] = kw["every"]
    else:
        kw["at"] = parse_duration(when, "fault time")
    for item in options:
        key, eq, value = item.partition("=")
        if not eq or key not in ("app", "device", "count"):
            raise SpecError(f"fault option {item!r} in {text!r}; allowed: app=TAG, device=N, count=N")
        if key == "app":
            kw["app"] = value
        else:
            try:
                number = int(value)
            except ValueError:
                number = -1
            if number < (1 if key == "count" else 0):
                raise SpecError(f"fault option {key}={value!r} in {text!r} must be a "
                                f"{'positive' if key == 'count' else 'non-negative'} integer")
            most = MAX_FAILED_EXECUTIONS if kind in EXEC_EFFECTS else MAX_ECC_EVENTS
            if key == "count" and number > most:
                what = "failed executions" if kind in EXEC_EFFECTS else "ECC events"
                raise SpecError(f"fault option count={value} in {text!r}: at most {most:,} "
                                f"{what} in one fault")
            kw[key] = number
    return FaultSpec(**kw)


def exec_timeout(env) -> float | None:
    """NEURON_RT_EXEC_TIMEOUT from `env` in seconds (None: unset). A hang lasts that long before
    the execution times out, so it must be positive: 0 divided the runtime's segments by zero."""
    text = env.get("NEURON_RT_EXEC_TIMEOUT")
    if not text:
        return None
    value = parse_duration(text, "NEURON_RT_EXEC_TIMEOUT")
    if value <= 0:
        raise SpecError(f"NEURON_RT_EXEC_TIMEOUT={text!r} must be positive")
    return value


def _parse_rate(kind: str, text: str, whole: str) -> dict:
    number, slash, unit = text.partition("/")
    unit = unit.strip().lower() if slash else ("exec" if kind in EXEC_EFFECTS and kind not in ECC_FAULTS else "s")
    if unit not in _RATE_UNITS:
        raise SpecError(f"fault rate unit {unit!r} in {whole!r}; allowed: {', '.join(_RATE_UNITS)}")
    try:
        value = float(number)
    except ValueError:
        raise SpecError(f"fault rate {number!r} in {whole!r} is not a number") from None
    per_exec = _RATE_UNITS[unit] is None
    if not math.isfinite(value) or value < 0 or (per_exec and value > 1):
        raise SpecError(f"fault rate {number!r} in {whole!r} must be "
                        + ("a probability in [0, 1]" if per_exec else "non-negative"))
    return {"rate": value if per_exec else value / _RATE_UNITS[unit], "per_exec": per_exec}


@dataclass(frozen=True, slots=True)
class FaultEvent:
    kind: str
    device: int | None         # instance device index, or None for an execution-only fault
    count: int


class FaultInjector:
    """Draws the faults one runtime meets. All randomness comes from the injected Generator."""

    def __init__(self, specs: list[FaultSpec] | tuple[FaultSpec, ...], rng: np.random.Generator,
                 devices: tuple[int, ...]) -> None:
        self.rng = rng
        self.devices = tuple(devices)
        self.specs = tuple(s for s in specs if s.device is None or s.device in self.devices)
        self._next_at = [s.at for s in self.specs]

    def _device(self, spec: FaultSpec) -> int | None:
        if spec.device is not None:
            return spec.device
        if not self.devices:
            return None
        return self.devices[int(self.rng.integers(len(self.devices)))]

    def due(self, t0: float, t1: float) -> list[FaultEvent]:
        """Events in simulated time (t0, t1]: timed, periodic and Poisson-rate faults."""
        out: list[FaultEvent] = []
        for i, spec in enumerate(self.specs):
            if spec.rate is not None and not spec.per_exec:
                n = int(self.rng.poisson(spec.rate * max(0.0, t1 - t0))) * spec.count
                if n:
                    out.append(FaultEvent(spec.kind, self._device(spec), n))
                continue
            at = self._next_at[i]
            fired = 0
            while at is not None and at <= t1:
                if at > t0 or (t0 == 0.0 and at == 0.0):
                    fired += 1
                at = at + spec.every if spec.every else None
            self._next_at[i] = at
            if fired:
                out.append(FaultEvent(spec.kind, self._device(spec), fired * spec.count))
        return out

    def per_execution(self, executions: int) -> list[FaultEvent]:
        """Faults among `executions` completed executions (binomial draws per /exec rate)."""
        out: list[FaultEvent] = []
        if executions <= 0:
            return out
        for spec in self.specs:
            if spec.rate is not None and spec.per_exec:
                n = int(self.rng.binomial(executions, spec.rate))
                if n:
                    dev = self._device(spec) if spec.kind in ECC_FAULTS else None
                    out.append(FaultEvent(spec.kind, dev, n * spec.count))
        return out


def format_fault(spec: FaultSpec) -> str:
    """The `--inject` text that parses back to `spec`."""
    if spec.rate is not None:
        when = f"rate={spec.rate!r}/exec" if spec.per_exec else f"rate={spec.rate!r}/s"
    elif spec.every is not None:
        when = f"every={spec.every!r}s"
    else:
        when = f"{spec.at!r}s"
    opts = "".join(f",{k}={v}" for k, v in (("app", spec.app), ("device", spec.device))
                   if v is not None)
    return f"{spec.kind}@{when}{opts}" + (f",count={spec.count}" if spec.count != 1 else "")
