"""Compatibility knowledge as data: one table of cases per foreign API.

Each bridge module has a sibling case table here (``pettingzoo_cases.py``, ``openspiel_cases.py``,
...). The same rows drive the parametrized tests and generate ``compat_matrix.md``, so what the
matrix claims is what the tests check. Library code never branches on an env's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Source = Literal["pettingzoo-aec", "pettingzoo-parallel", "openspiel", "rllib", "gymnasium", "marl_core"]


@dataclass(frozen=True)
class Case:
    """One foreign env (or game) and how the suite runs it through its bridge.

    Attributes:
        id: stable, unique, readable id used as the pytest id and the matrix row, e.g.
            ``"pettingzoo/classic/connect_four_v3/aec"`` or ``"openspiel/kuhn_poker"``.
        source: which API the env comes from.
        target: what to build: ``"module:attr"`` for a factory, or an OpenSpiel game string.
        kwargs: keyword arguments for the factory.
        max_steps: step budget per episode when the env may run long (None: the checker default).
        left_out: why the case is not run (None: it runs). Always a reason, never a silent gap.
        slow: run only in the slow tier.
        notes: anything a reader of the matrix should know.
    """

    id: str
    source: Source
    target: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    left_out: str | None = None
    slow: bool = False
    notes: str = ""
