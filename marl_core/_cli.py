"""What the command lines share: argument types with messages that say what was expected."""

from __future__ import annotations

import argparse
from typing import Any


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
