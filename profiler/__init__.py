"""`neuron-profile`: capture runs on the chip model (built-in workloads or real PyTorch scripts),
store them in one profile file, and turn them into summaries, Chrome/Perfetto traces, diffs and
advice.

    >>> from profiler import load
    >>> prof = load("profile.nsprof")

PyTorch capture in torch.profiler's shape (torch is an optional dependency)::

    import profiler
    with profiler.profile(instance="trn2.48xlarge",
                          schedule=profiler.schedule(wait=1, warmup=1, active=2),
                          on_trace_ready=profiler.save_to("out.nsprof")) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
"""
from __future__ import annotations

from device_model import __version__

_LAZY = {
    "load": ("model.fileformat", "load"), "save": ("model.fileformat", "save"),
    "Profile": ("model.profile", "Profile"), "ProfileError": ("model.profile", "ProfileError"),
    "capture_workload": ("capture.builtin", "capture_workload"),
    "profile": ("torch_api", "profile"), "schedule": ("torch_api", "schedule"),
    "save_to": ("torch_api", "save_to"), "summarize": ("analysis.summary", "summarize"),
    "CaptureOptions": ("capture.options", "CaptureOptions"),
    "ProfilerUsageError": ("errors", "ProfilerUsageError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """Import on first use, so `import profiler` never pulls in torch."""
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'profiler' has no attribute {name!r}")
