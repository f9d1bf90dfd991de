"""argparse helpers shared by the project's command-line tools."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: a positive integer, with a one-line message otherwise."""
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: 0 or a positive integer, with a one-line message otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value
