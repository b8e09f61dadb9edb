"""What the command lines share: argument types with messages that say what was expected, and a
quiet end when the reader of their output goes away."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

#: The exit status of a command whose output pipe closed (a shell's for a command killed by SIGPIPE).
CLOSED_PIPE_STATUS = 128 + 13


def quiet_on_closed_pipe(main: Callable[..., int]) -> Callable[..., int]:
    """Wrap a command's ``main`` so that a reader closing its output early (``marl-check ... | head``)
    ends it with :data:`CLOSED_PIPE_STATUS` instead of a BrokenPipeError traceback."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> int:
        try:
            status = main(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows up here when the output was buffered
            return status
        except BrokenPipeError:
            # Python flushes stdout again at exit: point it at /dev/null so that flush is silent.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return CLOSED_PIPE_STATUS

    return run


def number_arg(kind: type, *, minimum: float = 0, inclusive: bool = False, why: str = "") -> Any:
    """An argparse type: a number of ``kind`` above ``minimum`` (or equal to it, with ``inclusive``);
    ``why`` is added to the message of a number out of range."""
    bound = f"{minimum} or more" if inclusive else f"above {minimum}"
    what = "an integer" if kind is int else "a number"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, received {text!r}") from None
        if not (value >= minimum if inclusive else value > minimum):  # NaN fails both
            raise argparse.ArgumentTypeError(f"expected {what} {bound}{why}, received {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse
