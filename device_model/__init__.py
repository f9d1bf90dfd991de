"""The instrumented Trainium chip model: specs, cost model, scheduler, workloads, counters."""
from importlib.metadata import PackageNotFoundError, version as _dist_version

from .core import Instance, Run, instance
from .program import CollectiveGroup, Program

__all__ = ["CollectiveGroup", "Instance", "Program", "Run", "instance"]

# The one version source is pyproject.toml; every package and tool reads it from here.
try:
    __version__ = _dist_version("neuronscope")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0"
