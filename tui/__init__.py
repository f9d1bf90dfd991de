"""neuron-top: a Textual workalike of AWS's neuron-top, on any neuron-monitor stream."""
from monitor import __version__

__all__ = ["__version__"]
