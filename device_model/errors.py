"""The one error type of the chip model's catalog: a bad name, value or override file.

A `SpecError` message is one line that names the bad value and lists the allowed ones, so a
command-line tool can print it as it is and exit with status 2.
"""
from __future__ import annotations

from collections.abc import Iterable


class SpecError(ValueError):
    """A device, instance, dtype, LNC setting or override value the catalog does not allow."""


def unknown_name(kind: str, value: object, allowed: Iterable[object]) -> SpecError:
    """`unknown instance 'trn9.large'; allowed: trn1.2xlarge, trn1.32xlarge, ...`"""
    return SpecError(f"unknown {kind} {value!r}; allowed: {', '.join(str(a) for a in allowed)}")
