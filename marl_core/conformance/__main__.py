"""``python -m marl_core.conformance MODULE:ATTR``: the same as ``marl-check``."""

from __future__ import annotations

if __name__ == "__main__":
    from marl_core.conformance.cli import main

    raise SystemExit(main())
