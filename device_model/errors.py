"""The one error type of the chip model's catalog: a bad name, value or override file.

A `SpecError` message is one line that names the bad value and lists the allowed ones, so a
command-line tool can print it as it is and exit with status 2.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class SpecError(ValueError):
    """A device, instance, dtype, LNC setting or override value the catalog does not allow."""


def unknown_name(kind: str, value: object, allowed: Iterable[object]) -> SpecError:
    """`unknown instance 'trn2.48xl'; did you mean 'trn2.48xlarge'? allowed: trn1.2xlarge, ...`"""
    names = [str(a) for a in allowed]
    return SpecError(f"unknown {kind} {value!r}; {did_you_mean(value, names)}allowed: "
                     f"{', '.join(names)}")


def did_you_mean(value: object, names: Iterable[str]) -> str:
    """`did you mean 'llama3-8b'? ` for a near miss of one of `names` (a typo, a dash too many),
    else nothing."""
    names = list(names)
    text = str(value).lower()
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.75)
    if not close:      # a prefix of a longer name (trn2.48xl), or a name with a character more
        close = [n for n in names if n.startswith(text) and len(text) >= 3][:1]
    return f"did you mean {close[0]!r}? " if close else ""
