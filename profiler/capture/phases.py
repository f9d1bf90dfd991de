"""The phase of a recorded call: the codes the recorders stamp and the names profiles keep."""
from __future__ import annotations

FORWARD, BACKWARD, OPTIMIZER, OTHER = 0, 1, 2, 3
PHASE_NAMES = ("forward", "backward", "optimizer", "other")
