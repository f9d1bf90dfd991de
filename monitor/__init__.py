"""The collector: simulated runtimes and the host become one immutable Report per period (the
neuron-monitor JSON schema); neuron-monitor and neuron-ls. Sinks read the chip only through here."""
from device_model import __version__

__all__ = ["__version__"]
