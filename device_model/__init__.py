"""The instrumented Trainium chip model: specs, cost model, scheduler, workloads, counters."""
from .core import Instance, Run, instance
from .program import CollectiveGroup, Program

__all__ = ["CollectiveGroup", "Instance", "Program", "Run", "instance"]
__version__ = "0.1.0"
