"""marl_core: the MultiAgentEnv core of marl-bridges.

Importing this package never imports torch or ray; only :mod:`marl_core.ppo` does.
"""

from __future__ import annotations

from marl_core.env import ALL, COMMON, AgentID, MultiAgentEnv, MultiAgentWrapper, make_multi_agent
from marl_core.errors import MultiAgentEnvError
from marl_core.grouping import GroupAgentsWrapper
from marl_core.rollout import EpisodeResult, RandomPolicy, Transition, play, rollout
from marl_core.vector import VectorMultiAgentEnv

__all__ = [
    "ALL",
    "COMMON",
    "AgentID",
    "EpisodeResult",
    "GroupAgentsWrapper",
    "MultiAgentEnv",
    "MultiAgentEnvError",
    "MultiAgentWrapper",
    "RandomPolicy",
    "Transition",
    "VectorMultiAgentEnv",
    "make_multi_agent",
    "play",
    "rollout",
]

__version__ = "0.1.0"
