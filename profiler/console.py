"""The voice of `neuron-profile` and of the processes a capture starts: one line on stderr per
message, under the command's name, so the lines of several workers never interleave."""
from __future__ import annotations

import sys

PROG = "neuron-profile"


def note(message: str) -> None:
    """`neuron-profile: MESSAGE` on stderr, in one write."""
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


def error(message: str) -> None:
    """`neuron-profile: error: MESSAGE` on stderr, in one write."""
    note(f"error: {message}")


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`1 step`, `2 steps`, `0 instructions`."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def contents(profile) -> str:
    """What a written profile holds: `3 steps, 12 operators, 400 instructions`, the steps a
    rank's (each rank of a job has a row of its own for every step)."""
    steps = len(set(profile.table("steps")["step"].tolist())) if profile.rows("steps") else 0
    return (f"{count(steps, 'step')}, {count(profile.rows('ops'), 'operator')}, "
            f"{count(profile.rows('instructions'), 'instruction')}")
