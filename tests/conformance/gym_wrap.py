"""A minimal real ``wrap`` for single-agent Gymnasium envs, registered in ``bridges._EXPORTS`` by tests.

It lets the tests exercise the checker's one lazy ``bridges.wrap`` call without depending on
the full bridges, through :func:`marl_core.make_multi_agent` (one agent, ``"agent_0"``).
"""

from __future__ import annotations

from typing import Any

from marl_core import MultiAgentEnv, make_multi_agent


def wrap(obj: Any) -> MultiAgentEnv:
    """``obj`` (a single-agent ``gymnasium.Env``) as a one-agent MultiAgentEnv."""
    return make_multi_agent(lambda config: obj)()
