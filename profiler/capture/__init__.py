"""Recording runs: built-in workloads on the chip model, and real PyTorch scripts (single process or torchrun) under the aten recorders."""
