"""The engine: instruction set, in-order lane scheduler, DMA contention, collectives, and the
columnar instruction timeline a run produces."""
