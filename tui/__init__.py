"""neuron-top: a Textual workalike of AWS's neuron-top, on any neuron-monitor stream."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("neuronscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"
