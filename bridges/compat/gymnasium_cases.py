"""Single-agent Gymnasium envs as cases: N copies through ``make_multi_agent``, or one agent
through :func:`bridges.gymnasium.from_gymnasium` (masks from ``info`` included).

The factories here take an ``env_id`` so the matrix can step the same raw Gymnasium envs for its
overhead figures.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from bridges.compat import Case
from marl_core.env import MultiAgentEnv, make_multi_agent


def multi_agent(env_id: str, num_agents: int = 2, **kwargs: Any) -> MultiAgentEnv:
    """``num_agents`` independent copies of ``gymnasium.make(env_id, **kwargs)``."""
    return make_multi_agent(env_id)({"num_agents": num_agents, **kwargs})


def single_agent(env_id: str, mask_info_key: str | None = None, **kwargs: Any) -> MultiAgentEnv:
    """``gymnasium.make(env_id, **kwargs)`` as a one-agent MultiAgentEnv."""
    from bridges.gymnasium import from_gymnasium

    return from_gymnasium(gym.make(env_id, **kwargs), mask_info_key=mask_info_key)


_MULTI = "bridges.compat.gymnasium_cases:multi_agent"
_SINGLE = "bridges.compat.gymnasium_cases:single_agent"
_BANDITS = "ray.rllib.examples.envs.classes.multi_agent"

CASES: list[Case] = [
    Case("gymnasium/CartPole-v1/x2", "gymnasium", _MULTI, {"env_id": "CartPole-v1"}),
    Case("gymnasium/Pendulum-v1/x2", "gymnasium", _MULTI, {"env_id": "Pendulum-v1"}),
    Case("gymnasium/Acrobot-v1/x2", "gymnasium", _MULTI, {"env_id": "Acrobot-v1"}, max_steps=200),
    Case("gymnasium/MountainCarContinuous-v0/x2", "gymnasium", _MULTI, {"env_id": "MountainCarContinuous-v0"}, max_steps=200),
    Case("gymnasium/FrozenLake-v1/x3", "gymnasium", _MULTI, {"env_id": "FrozenLake-v1", "num_agents": 3}),
    Case("gymnasium/Blackjack-v1/x2", "gymnasium", _MULTI, {"env_id": "Blackjack-v1"}),
    Case("gymnasium/LunarLander-v3/x2", "gymnasium", _MULTI, {"env_id": "LunarLander-v3"}, max_steps=200, slow=True),
    Case(
        "gymnasium/Taxi-v3/masked",
        "gymnasium",
        _SINGLE,
        {"env_id": "Taxi-v3", "mask_info_key": "action_mask"},
        max_steps=200,
        notes="the action mask moves from info into the observation",
    ),
    Case(
        "gymnasium/rllib_examples/SimpleContextualBandit",
        "gymnasium",
        f"{_BANDITS}.bandit_envs_discrete:SimpleContextualBandit",
        notes="one of RLlib's single-agent bandit examples kept in its multi_agent package",
    ),
    Case(
        "gymnasium/rllib_examples/LinearDiscreteEnv",
        "gymnasium",
        f"{_BANDITS}.bandit_envs_discrete:LinearDiscreteEnv",
        notes="one of RLlib's single-agent bandit examples kept in its multi_agent package",
    ),
    Case(
        "gymnasium/rllib_examples/WheelBanditEnv",
        "gymnasium",
        f"{_BANDITS}.bandit_envs_discrete:WheelBanditEnv",
        notes="one of RLlib's single-agent bandit examples kept in its multi_agent package",
    ),
    Case(
        "gymnasium/rllib_examples/ParametricRecSys",
        "gymnasium",
        f"{_BANDITS}.bandit_envs_recommender_system:ParametricRecSys",
        notes="one of RLlib's single-agent bandit examples kept in its multi_agent package",
    ),
]
"""One row per Gymnasium env (or copies of one)."""
