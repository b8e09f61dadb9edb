"""The parallel bridge's common step with many agents that share one action space.

Agents whose spaces have equal bounds are checked together (one loop per group); these tests put
a bad action at every position of such a group, in groups that interleave, and check that the
error names the right agent, that nothing reaches the env and that the episode goes on as if the
bad step had not been tried. PettingZoo's ``aec_to_parallel_wrapper`` gets the caller's action
dict (it only reads it); every other env gets its own copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.butterfly import pistonball_v6
from pettingzoo.utils.conversions import aec_to_parallel_wrapper, parallel_to_aec
from pettingzoo.utils.env import ParallelEnv

from bridges.pettingzoo import ParallelPettingZooEnv
from marl_core.env import ALL
from marl_core.errors import InvalidActionError, MissingActionError, UnexpectedActionError

SLIDER = spaces.Box(-1.0, 1.0, (1,), np.float32)
SCALAR = spaces.Box(0.0, 2.0, (), np.float32)
CELL = spaces.Box(-3, 3, (1, 1), np.int16)
DIAL = spaces.Discrete(5, start=-2)
KNOB = spaces.Discrete(3, dtype=np.int32)

# space, a good action, actions the full check accepts too, (bad action, reason) pairs
CASES: dict[str, tuple[spaces.Space, Any, list[Any], list[tuple[Any, str]]]] = {
    "slider": (
        SLIDER,
        np.array([0.25], np.float32),
        [np.array([-1.0], np.float32), np.array([1.0], ">f4"), np.array([0.5], np.float16)],
        [
            (np.array([1.5], np.float32), "outside"),
            (np.array([np.nan], np.float32), "NaN"),
            (np.array([0.5]), "dtype float64"),
            (np.array(0.5, np.float32), r"shape \(\)"),
            (np.array([[0.5]], np.float32), r"shape \(1, 1\)"),
            (np.array([0.5, 0.5], np.float32), r"shape \(2,\)"),
            (np.zeros(0, np.float32), r"shape \(0,\)"),
            ([0.5], "list"),
            (0.5, "float"),
        ],
    ),
    "scalar": (
        SCALAR,
        np.array(1.0, np.float32),
        [np.array(2.0, np.float32), np.array(0, np.int8)],
        [(np.array([1.0], np.float32), r"shape \(1,\)"), (np.array(2.5, np.float32), "outside")],
    ),
    "cell": (
        CELL,
        np.array([[2]], np.int16),
        [np.array([[-3]], np.int8)],
        [(np.array([2], np.int16), r"shape \(1,\)"), (np.array([[4]], np.int16), "outside")],
    ),
    "dial": (
        DIAL,
        1,
        [np.int64(-2), np.int8(2), np.array(0)],
        [(3, "outside"), (np.int64(-3), "outside"), (True, "bool"), (1.0, "float"), (None, "NoneType")],
    ),
    "knob": (
        KNOB,
        2,
        [np.int32(0), np.uint16(1)],
        [(np.int64(1), r"np.int64\(1\)"), (3, "outside")],
    ),
}


class Crowd(ParallelEnv):
    """``n`` agents whose action spaces cycle through ``action_spaces``; the episode lasts
    ``length`` steps. Every action dict received is kept (copied) in ``received``."""

    metadata = {"name": "crowd_v0", "is_parallelizable": True}

    def __init__(self, action_spaces: list[spaces.Space], n: int = 5, length: int = 4) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.spaces = {a: action_spaces[i % len(action_spaces)] for i, a in enumerate(self.possible_agents)}
        self.render_mode = None
        self.length = length
        self.received: list[dict[str, Any]] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 100.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return self.spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: np.array([0.0], np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        self.received.append(dict(actions))
        self.t += 1
        done = self.t >= self.length
        obs = {a: np.array([self.t], np.float32) for a in self.agents}
        rewards = {a: float(self.t) for a in self.agents}
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, Any] = {a: {} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def _good(env: ParallelPettingZooEnv, case_of: dict[str, str], **overrides: Any) -> dict[str, Any]:
    return {a: overrides.get(a, CASES[case_of[a]][1]) for a in env.agents}


def _crowd(names: list[str], n: int = 5) -> tuple[ParallelPettingZooEnv, dict[str, str]]:
    raw = Crowd([CASES[name][0] for name in names], n=n)
    case_of = {a: names[i % len(names)] for i, a in enumerate(raw.possible_agents)}
    return ParallelPettingZooEnv(raw), case_of


GROUPINGS = [["slider"], ["scalar"], ["cell"], ["dial"], ["knob"], ["slider", "dial"], ["dial", "knob", "slider"]]


@pytest.mark.parametrize("names", GROUPINGS, ids="+".join)
def test_a_bad_action_anywhere_in_a_group_is_caught_and_changes_nothing(names):
    for position in range(5):
        env, case_of = _crowd(names)
        env.reset(seed=0)
        env.step(_good(env, case_of))  # the fast path is set up and has run once
        agent_id = f"agent_{position}"
        for bad, reason in CASES[case_of[agent_id]][3]:
            with pytest.raises(InvalidActionError, match=rf"(?s)agent '{agent_id}'.*received.*{reason}"):
                env.step(_good(env, case_of, **{agent_id: bad}))
        assert len(env.env.received) == 1
        twin, _ = _crowd(names)
        twin.reset(seed=0)
        twin.step(_good(twin, case_of))
        while env.agents:
            assert data_equivalence(env.step(_good(env, case_of)), twin.step(_good(twin, case_of)))
        assert data_equivalence(env.env.received, twin.env.received)


@pytest.mark.parametrize("names", GROUPINGS, ids="+".join)
def test_what_the_full_check_accepts_reaches_the_env_from_any_position(names):
    env, case_of = _crowd(names)
    env.reset(seed=0)
    env.step(_good(env, case_of))
    for position in range(5):
        agent_id = f"agent_{position}"
        for action in CASES[case_of[agent_id]][2]:
            acting = env.agents
            env.step(_good(env, case_of, **{agent_id: action}))
            received = env.env.received[-1]
            assert list(received) == acting and data_equivalence(received[agent_id], action)
            assert all(data_equivalence(received[a], CASES[case_of[a]][1]) for a in acting if a != agent_id)
            if not env.agents:
                env.reset(seed=0)


def test_wrong_keys_in_interleaved_groups_raise_and_change_nothing():
    env, case_of = _crowd(["slider", "dial"])
    env.reset(seed=0)
    good = _good(env, case_of)
    env.step(good)
    with pytest.raises(UnexpectedActionError, match="'ghost_0'"):
        env.step({**{a: v for a, v in good.items() if a != "agent_3"}, "ghost_0": good["agent_3"]})
    with pytest.raises(MissingActionError, match=r"\['agent_0'\]"):
        env.step({a: v for a, v in good.items() if a != "agent_0"})
    with pytest.raises(UnexpectedActionError, match="'ghost_0'"):
        env.step({**good, "ghost_0": 0})
    assert len(env.env.received) == 1


def test_one_agent_alone_takes_the_fast_path_too():
    env, _ = _crowd(["dial"], n=1)
    env.reset(seed=0)
    obs, rewards, terminateds, truncateds, _ = env.step({"agent_0": 2})
    assert list(obs) == ["agent_0"] and rewards == {"agent_0": 1.0}
    assert terminateds == truncateds == {"agent_0": False, ALL: False}
    with pytest.raises(InvalidActionError, match="agent 'agent_0'"):
        env.step({"agent_0": 3})
    assert env.env.received == [{"agent_0": 2}]


def test_aec_to_parallel_gets_the_callers_dict_and_leaves_it_as_it_was():
    raw = aec_to_parallel_wrapper(parallel_to_aec(Crowd([DIAL], n=3)))
    env = ParallelPettingZooEnv(raw)
    seen: list[dict[str, Any]] = []
    step = raw.step

    def keep(actions: dict[str, Any]) -> tuple[dict, ...]:
        seen.append(actions)
        return step(actions)

    raw.step = keep  # type: ignore[method-assign]
    env.reset(seed=0)
    actions = {"agent_0": 0, "agent_1": 1, "agent_2": 2}
    env.step(actions)
    assert seen[-1] is actions and actions == {"agent_0": 0, "agent_1": 1, "agent_2": 2}


def test_a_new_episode_calls_the_envs_step_as_it_is_then():
    raw = Crowd([DIAL], n=2, length=2)
    env = ParallelPettingZooEnv(raw)
    counts: list[int] = []

    def counted(actions: dict[str, Any]) -> tuple[dict, ...]:
        counts[-1] += 1
        return Crowd.step(raw, actions)

    for episode in range(3):
        counts.append(0)
        if episode == 1:
            raw.step = counted  # type: ignore[method-assign]
        env.reset(seed=episode)
        while env.agents:
            env.step(dict.fromkeys(env.agents, 0))
    assert counts == [0, 2, 2] and len(raw.received) == 6


def test_pistonball_steps_through_the_fast_path_and_rejects_a_bad_piston():
    raw = pistonball_v6.parallel_env(n_pistons=4)
    env = ParallelPettingZooEnv(raw)
    env.reset(seed=0)
    good = {a: np.array([0.5], np.float32) for a in env.agents}
    for _ in range(3):
        obs, rewards, terminateds, truncateds, infos = env.step(good)
        assert obs.keys() == rewards.keys() == infos.keys() == set(good)
        assert terminateds == truncateds == {**dict.fromkeys(good, False), ALL: False}
    with pytest.raises(InvalidActionError, match=r"agent 'piston_2'.*outside"):
        env.step({**good, "piston_2": np.array([1.5], np.float32)})
    obs, _, terminateds, _, _ = env.step(good)  # the episode goes on
    assert obs.keys() == set(good) and not terminateds[ALL]


@pytest.mark.parametrize("names", GROUPINGS, ids="+".join)
def test_good_steps_never_need_the_full_check(names):
    env, case_of = _crowd(names)
    full_checks: list[dict[str, Any]] = []
    validate = env._validate

    def counted(action_dict: dict[str, Any], acting: list[str]) -> None:
        full_checks.append(action_dict)
        validate(action_dict, acting)

    env._validate = counted  # type: ignore[method-assign]
    for seed in range(2):
        env.reset(seed=seed)
        while env.agents:
            env.step(_good(env, case_of))
    assert full_checks == [] and len(env.env.received) == 8


@pytest.mark.parametrize("mask", [np.ones((3, 2), np.int8), np.array(1, np.int8)], ids=["two-dimensional", "0-d"])
def test_the_fast_mask_check_ignores_a_mask_that_does_not_fit_as_check_action_does(mask: np.ndarray) -> None:
    # They were a bare ValueError ("truth value of an array") and TypeError ("len() of unsized object").
    from bridges.pettingzoo_checks import ActionChecker
    from marl_core.spaces import check_action

    checker = ActionChecker(lambda agent_id: spaces.Discrete(3), check_legal=True)
    for action in range(3):
        check_action("a", spaces.Discrete(3), action, mask)
        checker("a", action, mask)
