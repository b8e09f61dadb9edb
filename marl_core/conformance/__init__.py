"""The conformance suite: the executable form of the MultiAgentEnv contract (``DESIGN.md``).

:func:`check_env` drives an env with seeded random legal actions over several episodes, checks
every result against the rules of :data:`~marl_core.conformance.rules.RULES` and returns a
:class:`ConformanceReport` with every violation at once: rule, agent, step, what was expected,
what arrived and how to fix it. The command line ``marl-check MODULE:ATTR`` does the same.

Example:
    >>> from marl_core.conformance import check_env
    >>> from examples.tic_tac_toe import TicTacToe
    >>> check_env(TicTacToe, episodes=2).ok
    True
"""

from __future__ import annotations

from marl_core.conformance.report import ConformanceReport, Finding
from marl_core.conformance.rules import RULES, Rule
from marl_core.conformance.runner import check_env

__all__ = ["RULES", "ConformanceReport", "Finding", "Rule", "check_env"]
