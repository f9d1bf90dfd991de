"""The simulated Neuron runtime: counter files in shared memory, runtime processes, instances."""
