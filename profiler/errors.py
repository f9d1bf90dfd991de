"""The profiler's own error for requests it cannot carry out as asked."""
from __future__ import annotations

from device_model.errors import SpecError


class ProfilerUsageError(SpecError):
    """A capture or view asked for something it cannot do: a command after `--` that is not a
    Python script or torchrun job, options that clash. The message is one line naming what was
    wrong; `neuron-profile` prints it and exits with status 2."""
