"""Whatever an env does, the checker reports it and never raises."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.conformance import check_env
from tests.fixtures.broken_envs import Duel


class Hostile:
    """A protocol look-alike whose every part can be made to misbehave."""

    def __init__(self, **bad: Any) -> None:
        self.bad = bad
        self.observation_spaces = {"a": spaces.Box(0.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"a": spaces.Discrete(2)}
        self._agents = ["a"]

    @property
    def possible_agents(self) -> Any:
        if "possible_agents" in self.bad:
            if self.bad["possible_agents"] == "unhashable":
                return ["a", ["b"]]
            raise RuntimeError("possible_agents exploded")
        return ["a"]

    @property
    def agents(self) -> Any:
        if self.bad.get("agents") == "unhashable":
            return ["a", ["b"]]
        if "agents" in self.bad:
            raise RuntimeError("agents exploded")
        return self._agents

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return self.bad.get("reset", ({"a": self.bad.get("obs", np.zeros(2, np.float32))}, {}))

    def step(self, action_dict: dict) -> Any:
        if "step" in self.bad:
            return self.bad["step"]
        obs = {"a": self.bad.get("obs", np.zeros(2, np.float32))}
        terminateds = {"__all__": True, **self.bad.get("terminateds", {})}
        return obs, {"a": self.bad.get("reward", 0.0)}, terminateds, {"__all__": False}, self.bad.get("infos", {})

    def close(self) -> None:
        if "close" in self.bad:
            raise self.bad["close"]


def _rules(**bad: Any) -> set[str]:
    return check_env(Hostile(**bad), episodes=2, max_steps=50).rules


def test_hostile_results_become_findings() -> None:
    assert _rules() == set()
    assert _rules(reset=None) == {"api.reset"}
    assert _rules(reset=({"a": 1}, None)) == {"api.reset"}
    assert _rules(step=None) == {"api.step"}
    assert _rules(step=(1, 2, 3, 4, 5)) == {"api.step"}
    assert _rules(obs=np.array(["x", "y"], dtype=object)) == {"spaces.obs-contains"}
    assert _rules(obs=(x for x in range(2))) >= {"spaces.obs-contains"}
    assert _rules(reward="1.0") == {"rewards.numeric"}
    assert _rules(reward=np.array([1.0])) == {"rewards.numeric"}
    assert _rules(reward=True) == {"rewards.numeric"}
    assert _rules(reward=10**400) == {"rewards.numeric"}
    assert _rules(terminateds={"a": np.array([True, False])}) == {"api.step"}
    assert _rules(terminateds={"__all__": np.array([True, True])}) == {"api.all-key", "termination.bounded"}
    assert _rules(close=SystemError("close exploded")) == {"close.idempotent"}


def test_raising_properties_become_findings() -> None:
    assert _rules(agents=True) == {"ids.agents-attr"}
    report = check_env(Hostile(agents="unhashable"), episodes=1, max_steps=5)
    assert report.rules == {"ids.agents-attr"}
    assert any("cannot be an agent id" in finding.message for finding in report.findings)
    assert _rules(possible_agents=True) >= {"ids.agents-attr"}
    assert _rules(possible_agents="unhashable") == {"ids.agents-attr"}


class _NoRepr:
    """A value whose repr() raises (all of them equal, so copies of an env compare equal)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __eq__(self, other: object) -> bool:
        return type(other) is _NoRepr

    def __hash__(self) -> int:
        return 0


def _cyclic() -> dict:
    observation: dict = {}
    observation["itself"] = observation
    return observation


def test_odd_values_are_findings_never_crashes_of_the_checker() -> None:
    assert _rules(reward=_NoRepr()) == {"rewards.numeric"}
    assert _rules(terminateds={"a": _NoRepr()}) == {"api.step"}
    assert _rules(terminateds={"__all__": _NoRepr()}) >= {"api.all-key"}
    assert _rules(infos={"a": _NoRepr()}) == {"infos.keys"}
    assert _rules(obs=_cyclic()) == {"spaces.obs-contains"}


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class RaisesUnprintable(Hostile):
    def step(self, action_dict: dict) -> Any:
        raise _Unprintable()


class PaysAnUnprintableStranger(Hostile):
    def step(self, action_dict: dict) -> Any:
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, {**rewards, _NoRepr(): 0.0}, terminateds, truncateds, infos


class ListsAnUnprintableStranger(Hostile):
    @property
    def agents(self) -> Any:
        return ["a", _NoRepr()]


def test_unprintable_errors_and_ids_are_findings_never_crashes_of_the_checker() -> None:
    report = check_env(RaisesUnprintable(), episodes=1, max_steps=5)
    assert report.rules == {"api.step"} and "_Unprintable: <exception str() failed>" in report.findings[0].message
    assert check_env(PaysAnUnprintableStranger(), episodes=1, max_steps=5).rules == {"ids.known"}
    assert check_env(ListsAnUnprintableStranger(), episodes=1, max_steps=5).rules == {"ids.agents-attr"}


def test_tensor_observations_are_compared_by_value() -> None:
    # torch tensors have no single truth value for ==: a seeded env is still deterministic.
    import torch

    assert _rules(obs=torch.zeros(2)) == {"spaces.obs-contains"}


class GhostJoins(Duel):
    """At step 2 an agent outside possible_agents shows up in the obs dict, and acts."""

    def step(self, action_dict):
        action_dict = {a: x for a, x in action_dict.items() if a != "ghost"}
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if 2 <= self.t < self.LENGTH:
            obs["ghost"] = self.observe("a")
        return obs, rewards, terminateds, truncateds, infos

    def get_action_space(self, agent_id):
        return spaces.Discrete(3) if agent_id == "ghost" else super().get_action_space(agent_id)


class PossibleAgentsAsKeys(Duel):
    """possible_agents is a dict_keys view, not a list."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.possible_agents = dict.fromkeys(self.IDS).keys()


def test_one_mistake_is_one_finding_not_a_cascade() -> None:
    ghost = check_env(GhostJoins)
    assert ghost.rules == {"ids.known"}, str(ghost)
    assert ghost.steps == GhostJoins.LENGTH * 3 * 3  # 3 whole episodes, explored and replayed twice
    keys = check_env(PossibleAgentsAsKeys)
    assert keys.rules == {"ids.agents-attr"}, str(keys)
    assert "possible_agents is dict_keys(['a', 'b', 'c'])" in keys.findings[0].message


class _LazyDict(dict):
    def items(self):
        raise RuntimeError("lazy items failed")


class UnreadableFlags(Duel):
    """Returns terminateds as a dict subclass whose items() raises."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, rewards, _LazyDict(terminateds), truncateds, infos


def test_result_dicts_that_cannot_be_read_are_findings_not_crashes() -> None:
    # The user's RuntimeError escaped check_env ("a marl-check bug" on the command line).
    report = check_env(UnreadableFlags)
    assert report.rules == {"api.step"}
    assert "reading the terminateds dict that step() returned in episode 0 (seed 0) raised" in report.findings[0].message


class BadUnseededReset(Duel):
    """reset() without a seed (RLlib's first call) returns an unknown agent and a bad observation."""

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        if seed is None:
            return {**obs, "a": np.full(2, 7.0), "ghost": 1}, infos
        return obs, infos


def test_the_results_of_a_reset_without_arguments_are_checked_too() -> None:
    report = check_env(BadUnseededReset)
    assert report.rules == {"ids.known", "spaces.obs-contains"}
    assert all("reset() without arguments" in f.message for f in report.findings)


@dataclass
class _Point:
    xy: np.ndarray


class _PointSpace(spaces.Space):
    def __init__(self) -> None:
        super().__init__(None, None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, _Point)


class PointObservations(Duel):
    """Observes dataclasses holding arrays (== on them raises): deterministic, so correct."""

    VALIDATE = False

    def __init__(self, config=None):
        super().__init__(config)
        self.observation_spaces = {a: _PointSpace() for a in self.possible_agents}

    def observe(self, agent_id):
        return _Point(super().observe(agent_id)["observation"])


def test_equal_objects_holding_arrays_are_not_a_divergence() -> None:
    # They were compared by identity: "differs: _Point(xy=array(...)) then _Point(xy=array(...))".
    report = check_env(PointObservations)
    assert "determinism.seed" not in report.rules, str(report)


class GrowsItsSpaces(Duel):
    """Declares a wider observation space from its first seeded reset on (observations unchanged)."""

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            wider = spaces.Box(-100.0, 100.0, (3,), np.float32)
            self.observation_spaces = {a: spaces.Dict({"observation": wider, "action_mask": space["action_mask"]})
                                       for a, space in self.observation_spaces.items()}
        return super().reset(seed=seed, options=options)


def test_spaces_that_change_between_resets_are_a_finding() -> None:
    # The checker read the spaces once and said nothing.
    report = check_env(GrowsItsSpaces)
    changed = [f for f in report.findings if f.rule == "spaces.defined"]
    assert {f.agent for f in changed} == {"a", "b", "c"}
    assert "the observation space of agent 'a' changed after reset() in episode 0 (seed 0)" in changed[0].message


class ReusesAnOrderedDict(Duel):
    """Returns one OrderedDict of rewards, cleared and refilled at every step."""

    def __init__(self, config=None):
        super().__init__(config)
        self.shared_rewards: collections.OrderedDict = collections.OrderedDict()

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        self.shared_rewards.clear()
        self.shared_rewards.update(rewards)
        return obs, self.shared_rewards, terminateds, truncateds, infos


def test_a_reused_dict_subclass_is_still_seen_though_the_checker_reads_a_copy() -> None:
    assert check_env(ReusesAnOrderedDict).rules == {"obs.aliasing"}


@dataclass(eq=True)
class _Node:
    x: np.ndarray
    prev: Any = None
    next: Any = None


class _NodeSpace(spaces.Space):
    def __init__(self) -> None:
        super().__init__(None, None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, _Node)


class RingObservations(Duel):
    """Observes a ring of two nodes holding arrays (each refers to the other twice)."""

    VALIDATE = False

    def __init__(self, config=None):
        super().__init__(config)
        self.observation_spaces = {a: _NodeSpace() for a in self.possible_agents}

    def observe(self, agent_id):
        first, second = _Node(super().observe(agent_id)["observation"]), _Node(np.zeros(2))
        first.prev = first.next = second
        second.prev = second.next = first
        return first


def test_observations_that_refer_to_each_other_in_a_cycle_are_compared_once() -> None:
    # The attribute walk doubled at every level of the ring: hours for one comparison.
    report = check_env(RingObservations)
    assert "determinism.seed" not in report.rules, str(report)


class NumpyAgents:
    """Follows the protocol but lists its agents in a numpy array (not a list)."""

    possible_agents = np.array(["a", "b"])
    observation_spaces = {a: spaces.Discrete(2) for a in ("a", "b")}
    action_spaces = observation_spaces

    def reset(self, *, seed=None, options=None):
        return {"a": 0, "b": 0}, {}

    def step(self, action_dict):
        return {"a": 0, "b": 0}, {"a": 0.0, "b": 0.0}, {"__all__": True}, {"__all__": False}, {}


def test_possible_agents_in_a_numpy_array_are_a_finding_not_a_crash() -> None:
    assert "ids.agents-attr" in check_env(NumpyAgents()).rules
