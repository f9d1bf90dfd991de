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


class Once(argparse.Action):
    """An option that says what is compared, given at most once: a second `-w` or `--vs` had
    silently replaced the first (`--vs dtype=fp8 --vs dtype=fp32` compared fp32 only). The
    first repeat is kept in `given_twice` (see `repeated_option`), for the tool to refuse in
    its own one-line form."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        seen = getattr(namespace, "given_once", set())
        if self.dest in seen and not getattr(namespace, "given_twice", ""):
            namespace.given_twice = f"{option_string} given twice; give it once" + (
                " (several changes go in one: --vs a=1,b=2)" if self.dest == "vs" else "")
        namespace.given_once = seen | {self.dest}
        setattr(namespace, self.dest, values)


def repeated_option(args: argparse.Namespace) -> str:
    """The message for an option given twice (Once), or ""."""
    return getattr(args, "given_twice", "")
