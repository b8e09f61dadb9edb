"""Every bridge's ``step()`` takes a dict of actions: anything else (a bare action, as in
single-agent code) raises ``ActionDictError`` naming what arrived, and changes nothing; a Mapping
that is not a dict works like a dict."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import gymnasium as gym
import pytest

from bridges.gymnasium import from_gymnasium
from bridges.openspiel import OpenSpielEnv
from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv
from bridges.rllib import from_rllib
from marl_core import MultiAgentEnv, make_multi_agent
from marl_core.errors import ActionDictError, MultiAgentEnvError
from marl_core.rollout import RandomPolicy
from marl_core.vector import VectorMultiAgentEnv
from tests.core.test_vector import assert_same
from tests.fixtures.envs import RockPaperScissors


def _tictactoe() -> MultiAgentEnv:
    from pettingzoo.classic import tictactoe_v3

    return PettingZooEnv(tictactoe_v3.env())


def _simple_spread() -> MultiAgentEnv:
    from mpe2 import simple_spread_v3

    return ParallelPettingZooEnv(simple_spread_v3.parallel_env(max_cycles=5))


def _rllib_cartpoles() -> MultiAgentEnv:
    from ray.rllib.env.multi_agent_env import make_multi_agent as rllib_make_multi_agent

    return from_rllib(rllib_make_multi_agent("CartPole-v1")({"num_agents": 2}))


ENVS: dict[str, Callable[[], MultiAgentEnv]] = {
    "openspiel turns": lambda: OpenSpielEnv("tic_tac_toe"),
    "openspiel simultaneous": lambda: OpenSpielEnv("goofspiel(num_cards=4)"),
    "pettingzoo aec": _tictactoe,
    "pettingzoo parallel": _simple_spread,
    "gymnasium": lambda: from_gymnasium(gym.make("CartPole-v1")),
    "rllib": _rllib_cartpoles,
    "grouped": lambda: RockPaperScissors().with_agent_groups({"pair": ["player1", "player2"]}),
    "make_multi_agent": lambda: make_multi_agent("CartPole-v1")({"num_agents": 2}),
}


class _ReadOnlyActions(Mapping):
    """A Mapping that is no dict: bridges must read it like one."""

    def __init__(self, actions: dict[Any, Any]) -> None:
        self._actions = actions

    def __getitem__(self, key: Any) -> Any:
        return self._actions[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._actions)

    def __len__(self) -> int:
        return len(self._actions)


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("bad", [3, [3], None, "player_0"], ids=["int", "list", "None", "str"])
def test_a_step_without_a_dict_raises_naming_what_arrived(name: str, bad: Any) -> None:
    env = ENVS[name]()
    obs, _ = env.reset(seed=0)
    with pytest.raises(ActionDictError, match=rf"takes a dict of actions keyed by agent id, received {type(bad).__name__} ") as raised:
        env.step(bad)
    assert isinstance(raised.value, MultiAgentEnvError) and isinstance(raised.value, TypeError)
    assert raised.value.received is bad
    # Nothing moved: the same agents act, and a proper dict steps.
    policy = RandomPolicy(ENVS[name](), seed=0)
    actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
    env.step(actions)


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("wrap", [OrderedDict, MappingProxyType, _ReadOnlyActions], ids=lambda w: w.__name__)
def test_any_mapping_of_actions_steps_like_a_dict(name: str, wrap: Callable[[dict], Mapping]) -> None:
    env, twin = ENVS[name](), ENVS[name]()
    obs, _ = env.reset(seed=0)
    twin.reset(seed=0)
    policy = RandomPolicy(ENVS[name](), seed=0)
    for _ in range(3):
        actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
        result = env.step(wrap(copy.copy(actions)))
        expected = twin.step(actions)
        assert_same(result, expected)
        obs = result[0]
        if result[2]["__all__"] or result[3].get("__all__"):
            break


def test_a_vector_refuses_a_bare_action_before_any_env_steps() -> None:
    with VectorMultiAgentEnv([RockPaperScissors] * 2, "sync") as venv:
        venv.reset(seed=0)
        with pytest.raises(MultiAgentEnvError, match=r"env 1: step\(\) takes a dict of actions keyed by agent id, received int 1"):
            venv.step([{"player1": 0, "player2": 1}, 1])
        assert venv.step([{"player1": 0, "player2": 1}] * 2)[1] == [{"player1": -1, "player2": 1}] * 2

