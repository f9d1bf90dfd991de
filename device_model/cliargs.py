"""argparse helpers shared by the project's command-line tools."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: a positive integer, with a one-line message otherwise."""
    return _integer(text, 1, "a positive integer (1 or more)")


def non_negative_int(text: str) -> int:
    """An argparse type: 0 or a positive integer, with a one-line message otherwise."""
    return _integer(text, 0, "0 or more")


def _integer(text: str, least: int, wanted: str) -> int:
    """`text` as an integer of at least `least`; the message names what is wanted, so that a
    -1 refused as "must be 0 or more" does not invite a 0 that is refused too."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} must be {wanted}")
    return value
