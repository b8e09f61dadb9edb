"""What check_env accepts: instances, classes, factories, protocol look-alikes, foreign envs via bridges.wrap."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control import CartPoleEnv
from pettingzoo import ParallelEnv
from pettingzoo.classic.connect_four import connect_four
from pettingzoo.utils import wrappers

import bridges
from marl_core.conformance import check_env
from marl_core.conformance.cli import main
from marl_core.errors import TargetBuildError
from tests.fixtures.broken_envs import Duel


def test_function_taking_config_is_called_with_an_empty_dict() -> None:
    received = []

    def make(config: dict[str, Any]) -> Duel:
        received.append(config)
        return Duel(config)

    assert check_env(make, episodes=1).findings == ()
    assert received and all(config == {} for config in received)


def test_factory_needing_two_arguments_is_refused() -> None:
    def make(config: dict, flavour: str) -> Duel:
        return Duel(config)

    with pytest.raises(TargetBuildError, match="needs arguments"):
        check_env(make)


def test_factory_that_raises_is_a_build_error() -> None:
    def make() -> Duel:
        raise RuntimeError("no GPU here")

    with pytest.raises(TargetBuildError, match="no GPU here"):
        check_env(make)


class LookAlike:
    """Not a subclass of ours: follows the protocol by duck typing, so it is checked directly."""

    def __init__(self) -> None:
        self.inner = Duel()
        self.possible_agents = self.inner.possible_agents
        self.observation_spaces = self.inner.observation_spaces
        self.action_spaces = self.inner.action_spaces

    @property
    def agents(self) -> list[str]:
        return self.inner.agents

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return self.inner.reset(seed=seed, options=options)

    def step(self, action_dict: dict) -> Any:
        return self.inner.step(action_dict)

    def close(self) -> None:
        self.inner.close()


class NeedsItsConfig(Duel):
    """Takes an optional config that it reads, as RLlib's example envs do (None: it fails)."""

    def __init__(self, config=None):
        self.size = config.get("size", 3)  # None has no get
        super().__init__(config)


def test_a_class_whose_optional_config_it_needs_is_told_to_get_one() -> None:
    # RLlib's RockPaperScissors: "'NoneType' object has no attribute 'get'" and no word of --config.
    with pytest.raises(TargetBuildError, match=r"called with no argument; if it needs its config, as RLlib passes one: "
                                               r"marl-check --config '\{\}', or check_env\(lambda: NeedsItsConfig\(\{\}\)\)"):
        check_env(NeedsItsConfig)
    assert check_env(lambda: NeedsItsConfig({})).ok

    class NeedsADisplay(Duel):
        def __init__(self, render_mode=None):
            raise RuntimeError("cannot open display :0")

    class TakesItByKeyword(Duel):
        def __init__(self, *, config=None):
            raise RuntimeError("cannot open display :0")

    for no_config in (NeedsADisplay, TakesItByKeyword):  # not a config, or not one --config can pass: no hint
        with pytest.raises(TargetBuildError) as caught:
            check_env(no_config)
        assert "cannot open display" in str(caught.value) and "--config" not in str(caught.value)


def test_protocol_look_alike_is_checked_without_wrapping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(bridges._EXPORTS, "wrap", raising=False)
    assert check_env(LookAlike).findings == ()
    assert check_env(LookAlike()).findings == ()


def test_non_env_without_wrap_is_a_build_error_naming_what_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(bridges._EXPORTS, "wrap", raising=False)
    with pytest.raises(TargetBuildError, match=r"lacks reset, step, possible_agents.*bridges.wrap"):
        check_env(42)


def test_pettingzoo_env_is_not_mistaken_for_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    from pettingzoo.classic import rps_v2

    monkeypatch.delitem(bridges._EXPORTS, "wrap", raising=False)
    with pytest.raises(TargetBuildError, match="PettingZoo"):
        check_env(rps_v2.parallel_env())


def test_foreign_env_goes_through_bridges_wrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bridges._EXPORTS, "wrap", "tests.conformance.gym_wrap")
    report = check_env(CartPoleEnv(), episodes=2)
    assert report.findings == (), str(report)
    assert report.target.startswith("gymnasium.envs.classic_control.cartpole.CartPoleEnv")
    assert report.steps > 0


def test_factory_of_foreign_envs_wraps_every_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bridges._EXPORTS, "wrap", "tests.conformance.gym_wrap")
    built: list[gym.Env] = []

    def make() -> gym.Env:
        built.append(CartPoleEnv())
        return built[-1]

    assert check_env(make, episodes=2).findings == ()
    assert len(built) == 2  # the explored env and the fresh one for determinism.seed


def test_wrap_failure_is_a_build_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bridges._EXPORTS, "wrap", "tests.conformance.gym_wrap")
    with pytest.raises(TargetBuildError, match=r"bridges\.wrap"):
        check_env(object())


@pytest.mark.ray
def test_rllib_envs_are_checked_through_from_rllib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing ray.rllib takes about 3.5 s here, hence the ray tier (no Ray instance is started).

    Checked directly, RLlib's own make_multi_agent envs and our to_rllib's output failed ids.agents-attr:
    RLlib lists an agent in ``agents`` for the step it ends in (RLlib's env check wants it so)."""
    from ray.rllib.env.multi_agent_env import make_multi_agent as rllib_make_multi_agent

    from bridges.rllib import to_rllib
    from tests.fixtures import rllib_seed_envs
    from tests.fixtures.envs import JoinLeaveEnv

    assert check_env(rllib_seed_envs.RockPaperScissors).findings == ()
    assert check_env(rllib_seed_envs.TicTacToe).rules == {"determinism.seed"}
    two_carts = check_env(lambda: rllib_make_multi_agent("CartPole-v1")({"num_agents": 2}), episodes=2)
    assert two_carts.errors == () and two_carts.via == "checked through bridges.wrap, as RLlibEnv"
    ours = check_env(lambda: to_rllib(JoinLeaveEnv()))
    assert ours.findings == () and ours.via == "checked through bridges.wrap, as JoinLeaveEnv"
    # A gymnasium.Env of RLlib's examples is no RLlib MultiAgentEnv: its report says what it lacks.
    from ray.rllib.examples.envs.classes.cliff_walking_wall_env import CliffWalkingWallEnv

    assert check_env(CliffWalkingWallEnv, episodes=1).via.endswith(
        "(CliffWalkingWallEnv is a gymnasium.Env without possible_agents, observation_spaces or "
        "get_observation_space(), action_spaces or get_action_space())")
    monkeypatch.delitem(bridges._EXPORTS, "wrap", raising=False)
    with pytest.raises(TargetBuildError, match=r"is not a multi-agent env of ours, and bridges\.wrap \(which converts "
                                               r"PettingZoo, OpenSpiel, RLlib and Gymnasium envs\) is not available"):
        check_env(rllib_seed_envs.RockPaperScissors)


@pytest.mark.ray
def test_an_rllib_old_api_stack_env_goes_through_from_rllib() -> None:
    """Importing ray.rllib is slow, hence the ray tier (no Ray instance is started). It names its agents in ``_agent_ids`` (possible_agents stays []): checked directly, that gave
    an ids.agents-attr error and a cascade of ids.known ones; from_rllib reads the ids."""
    import numpy as np
    from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv

    class OldStack(RLlibMultiAgentEnv):
        def __init__(self, config=None):
            super().__init__()
            self._agent_ids = {"a", "b"}
            self.observation_space = gym.spaces.Dict({a: gym.spaces.Box(0, 1, (2,), np.float32) for a in "ab"})
            self.action_space = gym.spaces.Dict({a: gym.spaces.Discrete(2) for a in "ab"})

        def reset(self, *, seed=None, options=None):
            self.rng, self.t = np.random.default_rng(seed), 0
            return {a: self.rng.random(2).astype(np.float32) for a in "ab"}, {}

        def step(self, action_dict):
            self.t += 1
            obs = {a: self.rng.random(2).astype(np.float32) for a in "ab"}
            return obs, dict.fromkeys("ab", 1.0), {"__all__": self.t >= 3}, {"__all__": False}, {}

    report = check_env(OldStack)
    assert report.ok and report.findings == (), str(report)


def _tic_tac_toe_game() -> Any:
    import pyspiel

    return pyspiel.load_game("tic_tac_toe")


def _connect_four_factory() -> Any:
    from pettingzoo.classic import connect_four_v3

    return connect_four_v3.env


def _rps_parallel_factory() -> Any:
    from pettingzoo.classic import rps_v2

    return rps_v2.parallel_env


def _cart_pole() -> Any:
    return gym.make("CartPole-v1")


@pytest.mark.parametrize(
    "make_target",
    [_tic_tac_toe_game, _connect_four_factory, _rps_parallel_factory, _cart_pole],
    ids=["pyspiel-game", "pettingzoo-aec-factory", "pettingzoo-parallel-factory", "gymnasium-instance"],
)
def test_real_bridges_wrap_accepts_foreign_envs(make_target: Any) -> None:
    assert "wrap" in bridges._EXPORTS
    report = check_env(make_target(), episodes=2)
    assert report.findings == (), str(report)
    assert report.steps > 0



class ResetFailsParallel(ParallelEnv):
    """A PettingZoo parallel env whose reset() raises (as pettingzoo 1.27's ``agent_selector``,
    a module now, does when a reset calls it)."""

    metadata = {"name": "reset_fails_parallel"}

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        raise KeyError("typo in reset")

    def step(self, actions: dict) -> Any:
        raise AssertionError("a check whose first reset failed steps nothing")


class ResetFailsAEC(connect_four.raw_env):
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        raise KeyError("typo in reset")


@pytest.mark.parametrize("target", [ResetFailsParallel, ResetFailsAEC])
def test_a_foreign_env_whose_reset_raises_in_its_bridge_is_an_api_reset_finding(target: Any) -> None:
    # It was a TargetBuildError, "... is not a multi-agent env, and bridges.wrap cannot convert
    # it: KeyError", and marl-check exited with 2 (a target that cannot be built).
    report = check_env(target)
    assert not report.ok and report.steps == 0
    assert [finding.rule for finding in report.findings] == ["api.reset"]
    finding = report.findings[0]
    assert finding.message == ("reset() raised while bridges.wrap converted the env (a PettingZoo bridge resets it "
                               "once to look for action masks in its infos); nothing else could be checked: KeyError: "
                               "'typo in reset'")
    assert 'raise KeyError("typo in reset")' in finding.traceback
    assert report.via == "bridges.wrap, which could not finish converting it"
    assert main([f"{__name__}:{target.__name__}", "--episodes", "1"]) == 1
    # Skipping the rule must not turn a check that never ran into a pass.
    with pytest.raises(TargetBuildError, match=r"its reset\(\) raised KeyError while bridges.wrap converted it: "
                                               r"'typo in reset'"):
        check_env(target, skip=["api.reset"])


class NoSpaces(ParallelEnv):
    metadata = {"name": "no_spaces"}
    possible_agents = ["a"]

    def reset(self, seed=None, options=None):
        return {"a": 0}, {"a": {}}

    def observation_space(self, agent):
        return self.observation_spaces[agent]  # never set


class ResetDropsInfos(connect_four.raw_env):
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        super().reset(seed=seed, options=options)
        del self.infos


def test_an_attribute_a_library_wrapper_cannot_read_is_not_called_a_method_of_the_env() -> None:
    # "its __getattr__() raised AttributeError": PettingZoo's wrapper's, read by the bridge.
    with pytest.raises(TargetBuildError) as raised:
        check_env(lambda: wrappers.OrderEnforcingWrapper(ResetDropsInfos()))
    assert raised.value.env_method is None
    assert "is not a multi-agent env, and bridges.wrap cannot convert it: AttributeError: " in str(raised.value)


def test_a_foreign_env_that_cannot_be_converted_is_named_with_the_method_that_raised() -> None:
    # It was "... is not a multi-agent env, and bridges.wrap cannot convert it", for a PettingZoo env.
    with pytest.raises(TargetBuildError) as raised:
        check_env(NoSpaces)
    assert raised.value.env_method == "observation_space"
    assert str(raised.value) == (f"{__name__}.NoSpaces no_spaces: its observation_space() raised AttributeError while "
                                 "bridges.wrap converted it: 'NoSpaces' object has no attribute 'observation_spaces'")


class OldApiDuck:
    """RLlib's old API stack without RLlib's class: agents in _agent_ids, one space for all."""

    def __init__(self) -> None:
        self._agent_ids = {"a", "b"}
        self.observation_space = self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return {"a": 0, "b": 0}, {}

    def step(self, action_dict):
        return {"a": 0, "b": 0}, {"a": 0.0, "b": 0.0}, {"__all__": True}, {"__all__": False}, {}


def test_an_old_api_env_outside_rllibs_class_is_told_how_to_be_checked() -> None:
    # The README promises that marl-check says how; the refusal only listed what it lacks.
    with pytest.raises(TargetBuildError, match=re.escape(
            "; it names its agents in _agent_ids, as envs of RLlib's old API stack do: subclass RLlib's MultiAgentEnv "
            "(bridges.wrap reads _agent_ids and single spaces), or set possible_agents and per-agent spaces "
            "(observation_spaces, action_spaces)")):
        check_env(OldApiDuck)
