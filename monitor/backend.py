"""Where the collector reads runtimes from: the backend Protocol.

The collector never opens a counter file itself. It asks a backend for the instance description
and for the live runtimes, and reads each runtime's handle once per collection. The one backend
today is the simulated instance's shared memory (``collector_shm.ShmBackend``, the default); a
new source of runtimes goes next to it as another class with these methods:

- a real Neuron driver: ``instance()`` from the driver's sysfs and EC2 metadata, one handle per
  runtime the driver lists;
- a recorded stream: handles that replay snapshots.

A handle's ``read()`` returns a snapshot with the fields of device_model's ``RuntimeSnapshot``
(cumulative counters; see collector_shm.sample_of for the ones used) and raises one of the
backend's ``unreadable`` exceptions when the counters cannot be read; the collector then reports
that runtime with ``error`` set and carries on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

__all__ = ["RuntimeHandle", "RuntimeBackend"]


class RuntimeHandle(Protocol):
    """One runtime, kept open between collections."""

    pid: int
    path: Path  # where it lives; once it no longer exists, the runtime has gone

    def read(self) -> Any:
        """One consistent snapshot of the runtime's cumulative counters."""

    def header(self) -> dict[str, Any]:
        """The static description (tag, cores, models) even when the counters are damaged."""

    def close(self) -> None:
        """Release it; the next listing opens it again."""


class RuntimeBackend(Protocol):
    """The runtimes of one instance, and its description."""

    # Exceptions a handle's read() raises for a runtime whose counters cannot be read.
    unreadable: tuple[type[Exception], ...]
    # Runtimes found dead and cleaned up by runtimes(), so far.
    removed: int

    def instance(self) -> Any | None:
        """The instance description (catalog name, device and core versions, EC2 identity, LNC),
        or None when there is no Neuron device (neuron-monitor then reports no runtimes)."""

    def runtimes(self) -> list[RuntimeHandle]:
        """The live runtimes now. Handles of runtimes that have exited are closed (and their
        leftovers removed, counted in ``removed``)."""

    def close(self) -> None:
        """Release every handle."""
