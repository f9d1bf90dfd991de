"""Suite-wide set-up, before any test runs."""
from __future__ import annotations

import signal

# Started in the background of a non-interactive shell (`make test &`, a CI step's `&`), the
# suite inherits SIGINT ignored, and so would every process it starts: the tests that stop
# their tools with SIGINT (Ctrl-C) would see it ignored. A Python handler is not inherited
# across exec, so the tools start with SIGINT as a terminal gives it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
