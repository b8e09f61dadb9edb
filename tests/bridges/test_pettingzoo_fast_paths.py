"""The PettingZoo bridges' fast paths accept exactly what the full checks accept.

The bridges check the common actions (plain integers for Discrete spaces, arrays of the exact
dtype and shape for Box spaces) inline and send everything else, and every failure, through
:func:`marl_core.spaces.check_action`. These tests drive both bridges with actions at and just
past every kind of bound, and with envs whose agents come, go, change order or go unobserved.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.utils.conversions import parallel_to_aec
from pettingzoo.utils.env import ParallelEnv

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv
from marl_core.env import ALL, COMMON
from marl_core.errors import (
    EnvContractError,
    InvalidActionError,
    MissingActionError,
    UnexpectedActionError,
)
from marl_core.spaces import check_action

ACTION_SPACES: dict[str, spaces.Space] = {
    "slider_0": spaces.Box(-1.0, 1.0, (1,), np.float32),
    "arm_0": spaces.Box(np.array([-1, -2, 0], np.float32), np.array([1, 2, 5], np.float32), (3,), np.float32),
    "camera_0": spaces.Box(0, 255, (10, 10), np.uint8),
    "counter_0": spaces.Box(-5, 5, (2,), np.int64),
    "dial_0": spaces.Discrete(3, start=-1),
    "knob_0": spaces.Discrete(4, dtype=np.int32),
}

GOOD: dict[str, Any] = {
    "slider_0": np.array([1.0], np.float32),
    "arm_0": np.array([-1.0, 2.0, 0.0], np.float32),
    "camera_0": np.full((10, 10), 255, np.uint8),
    "counter_0": np.array([-5, 5], np.int64),
    "dial_0": -1,
    "knob_0": 3,
}

# Accepted by the full check though the fast path passes them on: other integer types,
# dtypes that cast safely to the space's dtype, bounds hit exactly.
ALSO_GOOD: list[tuple[str, Any]] = [
    ("dial_0", np.int8(1)),
    ("dial_0", np.uint32(0)),
    ("knob_0", np.int32(3)),
    ("knob_0", np.uint16(0)),
    ("dial_0", np.array(0)),
    ("slider_0", np.array([-1.0], np.float16)),
    ("slider_0", np.array([0.5], ">f4")),  # big-endian: an equal dtype but not numpy's shared one
    ("arm_0", np.array([1, -2, 5], np.int8)),
    ("counter_0", np.array([3, -4], np.int32)),
    ("camera_0", np.zeros((10, 10), np.uint8)),
]

BAD: list[tuple[str, Any, str]] = [
    ("slider_0", np.array([1.01], np.float32), "outside"),
    ("slider_0", np.array([np.nan], np.float32), "NaN"),
    ("slider_0", np.array([0.5]), "dtype float64"),
    ("slider_0", np.array(0.5, np.float32), r"shape \(\)"),
    ("slider_0", [0.5], "list"),
    ("slider_0", 0.5, "float"),
    ("arm_0", np.array([1.5, 0.0, 0.0], np.float32), r"index \(0,\)"),  # fine in element 1, not in 0
    ("arm_0", np.array([0.0, 0.0, -0.5], np.float32), r"index \(2,\)"),
    ("arm_0", np.array([0.0, np.inf, 0.0], np.float32), r"infinity at index \(1,\) where the space is bounded"),
    ("arm_0", np.array([0.0, 0.0, np.nan], np.float32), r"NaN at index \(2,\)"),
    ("camera_0", np.zeros((10, 10), np.int16), "dtype int16"),
    ("camera_0", np.zeros((10, 9), np.uint8), "shape"),
    ("counter_0", np.array([6, 0], np.int64), "outside"),
    ("dial_0", 2, "outside"),
    ("dial_0", np.int64(-2), "outside"),
    ("dial_0", True, "bool"),
    ("dial_0", 1.0, "float"),
    ("dial_0", None, "NoneType"),
    ("dial_0", np.uint64(0), r"np.uint64\(0\)"),  # gymnasium: uint64 does not cast safely to int64
    ("knob_0", np.int64(1), r"np.int64\(1\)"),  # nor int64 to the space's int32
]


class Controls(ParallelEnv):
    """Six agents with Box and Discrete actions of every shape the fast paths treat apart.

    ``slider_0`` terminates after ``leave_at`` steps (with a final observation); the episode ends
    after ``length`` steps. With ``reorder`` the order of ``agents`` flips every step; with
    ``hide`` the observation of ``dial_0`` is left out at step 2; with ``meddle`` the env empties
    the action dict it receives; with ``stats`` the infos of every step also hold ``"stats"``, a
    key that is not an agent; with ``ghost`` every step also observes ``ghost_0``, an agent that
    never acts; with ``sticky`` ``slider_0`` is truncated (not terminated) and the observation and
    flag dicts are keyed by ``possible_agents`` at every step, as in PettingZoo's custom-env
    tutorial, so that agents that left are observed and flagged again. Every action dict received is kept (copied) in ``received``.
    """

    metadata = {"name": "controls_v0", "is_parallelizable": True}

    def __init__(
        self,
        *,
        length: int = 4,
        leave_at: int = 2,
        reorder: bool = False,
        hide: bool = False,
        meddle: bool = False,
        stats: bool = False,
        ghost: bool = False,
        sticky: bool = False,
    ) -> None:
        self.possible_agents = list(ACTION_SPACES)
        self.render_mode = None
        self.length, self.leave_at = length, leave_at
        self.reorder, self.hide, self.meddle, self.stats = reorder, hide, meddle, stats
        self.ghost, self.sticky = ghost, sticky
        self.received: list[dict[str, Any]] = []
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return ACTION_SPACES[agent]

    def _observe(self, agents: list[str]) -> dict[str, np.ndarray]:
        return {a: np.array([self.t, len(self.received)], np.float32) for a in agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.t = 0
        self.agents = list(self.possible_agents)
        self.flags = dict.fromkeys(self.possible_agents, (False, False))
        return self._observe(self.agents), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        for agent_id in self.agents:  # the env's own check, to see that bad actions never come here
            check_action(agent_id, ACTION_SPACES[agent_id], actions[agent_id])
        self.received.append(dict(actions))
        if self.meddle:
            actions.clear()
        self.t += 1
        done = self.t >= self.length
        leaving = self.t == self.leave_at
        terminations = {a: done or (a == "slider_0" and leaving and not self.sticky) for a in self.agents}
        truncations = {a: self.sticky and a == "slider_0" and leaving for a in self.agents}
        obs = self._observe(self.agents)
        if self.hide and self.t == 2:
            del obs["dial_0"]
        if self.ghost:
            obs["ghost_0"] = np.zeros(2, np.float32)
        self._last_obs_keys = list(obs)
        rewards = {a: float(self.t) for a in self.agents}
        infos: dict[str, Any] = {a: {"t": self.t} for a in self.agents}
        if self.stats:
            infos["stats"] = {"t": self.t}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        if self.sticky:  # keyed by possible_agents: an agent that left keeps its last flags
            obs = self._observe(self.possible_agents)
            self.flags.update({a: (terminations[a], truncations[a]) for a in terminations})
            terminations = {a: self.flags[a][0] for a in self.possible_agents}
            truncations = {a: self.flags[a][1] for a in self.possible_agents}
        if self.reorder:
            self.agents.reverse()
        return obs, rewards, terminations, truncations, infos


def _good(agents: list[str], **overrides: Any) -> dict[str, Any]:
    return {a: overrides.get(a, GOOD[a]) for a in agents}


def _aec_episode(env: PettingZooEnv, bad: tuple[str, Any, str] | None = None) -> list[tuple[Any, ...]]:
    """Play an episode with good actions; with ``bad``, first try that action at the agent's first turn."""
    results = []
    obs, _ = env.reset(seed=0)
    terminateds: dict[str, Any] = {}
    while True:
        (agent_id,) = [a for a in obs if not terminateds.get(a)]
        if bad is not None and agent_id == bad[0]:
            with pytest.raises(InvalidActionError, match=rf"(?s)agent '{agent_id}'.*{bad[2]}"):
                env.step({agent_id: bad[1]})
            bad = None
        result = env.step({agent_id: GOOD[agent_id]})
        results.append(result)
        obs, _, terminateds, _, _ = result
        if terminateds[ALL]:
            return results


@pytest.mark.parametrize(("agent_id", "action"), ALSO_GOOD, ids=lambda x: repr(x)[:30])
def test_parallel_bridge_accepts_what_the_full_check_accepts(agent_id, action):
    env = ParallelPettingZooEnv(Controls())
    env.reset(seed=0)
    env.step(_good(env.agents))  # the fast path is set up and has run once
    env.step(_good(env.agents, **{agent_id: action}))
    assert data_equivalence(env.env.received[-1][agent_id], action)


@pytest.mark.parametrize(("agent_id", "action", "reason"), BAD, ids=lambda x: repr(x)[:30])
def test_parallel_bridge_rejects_bad_actions_naming_agent_and_reason(agent_id, action, reason):
    env = ParallelPettingZooEnv(Controls())
    env.reset(seed=0)
    env.step(_good(env.agents))  # the fast path is set up and has run once
    with pytest.raises(InvalidActionError, match=rf"(?s)agent '{agent_id}'.*{reason}") as error:
        env.step(_good(env.agents, **{agent_id: action}))
    assert "received" in str(error.value)
    # Nothing reached the env and nothing changed: the episode goes on like an untouched one.
    assert len(env.env.received) == 1
    twin = ParallelPettingZooEnv(Controls())
    twin.reset(seed=0)
    twin.step(_good(twin.agents))
    while env.agents:
        assert data_equivalence(env.step(_good(env.agents)), twin.step(_good(twin.agents)))
    assert data_equivalence(env.env.received, twin.env.received)


@pytest.mark.parametrize(("agent_id", "action", "reason"), BAD, ids=lambda x: repr(x)[:30])
def test_aec_bridge_rejects_bad_actions_naming_agent_and_reason(agent_id, action, reason):
    raw = Controls()
    played = _aec_episode(PettingZooEnv(parallel_to_aec(raw)), (agent_id, action, reason))
    twin = Controls()
    assert data_equivalence(played, _aec_episode(PettingZooEnv(parallel_to_aec(twin))))
    assert data_equivalence(raw.received, twin.received)


@pytest.mark.parametrize(("agent_id", "action"), ALSO_GOOD, ids=lambda x: repr(x)[:30])
def test_aec_bridge_accepts_what_the_full_check_accepts(agent_id, action):
    raw = Controls()
    env = PettingZooEnv(parallel_to_aec(raw))
    obs, _ = env.reset(seed=0)
    while not raw.received:  # one cycle: every agent acts once
        (acting,) = obs
        obs, *_ = env.step({acting: action if acting == agent_id else GOOD[acting]})
    assert data_equivalence(raw.received[0][agent_id], action)


def test_wrong_keys_raise_on_the_fast_path_too():
    env = ParallelPettingZooEnv(Controls())
    env.reset(seed=0)
    env.step(_good(env.agents))
    good = _good(env.agents)
    with pytest.raises(UnexpectedActionError, match=r"'ghost_0' which is not expected to act"):
        env.step({**good, "ghost_0": 0})
    with pytest.raises(MissingActionError, match=r"\['arm_0'\]"):
        env.step({a: v for a, v in good.items() if a != "arm_0"})
    swapped = {**{a: v for a, v in good.items() if a != "arm_0"}, "ghost_0": GOOD["arm_0"]}
    with pytest.raises(UnexpectedActionError, match="'ghost_0'"):
        env.step(swapped)  # same number of actions, one key wrong
    assert len(env.env.received) == 1


def test_agents_that_leave_or_change_order_keep_the_contract():
    for reorder in (False, True):
        raw = Controls(length=5, reorder=reorder)
        env = ParallelPettingZooEnv(raw)
        obs, _ = env.reset(seed=0)
        terminateds: dict[str, Any] = {}
        for t in range(1, 6):
            acting = env.agents
            assert sorted(acting) == sorted(a for a in obs if not terminateds.get(a))
            obs, rewards, terminateds, truncateds, _ = env.step(_good(acting))
            assert obs.keys() == set(acting) and rewards.keys() == set(acting)
            assert terminateds.keys() == set(acting) | {ALL} and truncateds.keys() == set(acting) | {ALL}
            assert terminateds[ALL] == (t == 5) and not truncateds[ALL]
            if t == 2:
                assert terminateds["slider_0"] and "slider_0" not in env.agents
                with pytest.raises(UnexpectedActionError, match="'slider_0'"):
                    env.step(_good(acting))
        assert env.agents == []


def test_flags_of_agents_that_left_earlier_are_not_reported_again(caplog):
    # An env keying its flags by possible_agents flagged slider_0 again at every step after it was
    # truncated, and the last step blamed the episode's end on that old truncation.
    env = ParallelPettingZooEnv(Controls(length=4, leave_at=2, sticky=True))
    env.reset(seed=0)
    for t in range(1, 5):
        acting = env.agents
        obs, _, terminateds, truncateds, _ = env.step(_good(acting))
        assert obs.keys() == terminateds.keys() - {ALL} == truncateds.keys() - {ALL} == set(acting)
        assert truncateds.get("slider_0", False) == (t == 2)
    assert terminateds[ALL] and not truncateds[ALL]
    assert "neither act nor end" not in caplog.text  # its observations after its end are left out quietly


def test_common_step_hands_back_the_envs_dicts_and_never_changes_them():
    raw = Controls()

    returned: list[tuple[dict, ...]] = []
    step = raw.step

    def keep(actions: dict[str, Any]) -> tuple[dict, ...]:
        result = step(actions)
        returned.append(tuple(dict(d) for d in result))  # a copy of each dict as it came
        returned.append(result)
        return result

    raw.step = keep  # type: ignore[method-assign]
    env = ParallelPettingZooEnv(raw)
    env.reset(seed=0)
    obs, rewards, terminateds, truncateds, infos = env.step(_good(env.agents))
    as_returned, theirs = returned[-2], returned[-1]
    assert obs is theirs[0] and rewards is theirs[1] and infos is theirs[4]
    assert terminateds is not theirs[2] and truncateds is not theirs[3]
    assert ALL not in theirs[2] and ALL not in theirs[3]
    assert data_equivalence(as_returned, theirs)


def test_the_env_gets_its_own_copy_of_the_action_dict():
    env = ParallelPettingZooEnv(Controls(meddle=True))
    env.reset(seed=0)
    actions = _good(env.agents)
    env.step(actions)
    assert list(actions) == list(ACTION_SPACES)


def test_a_live_agent_left_unobserved_is_reported():
    env = ParallelPettingZooEnv(Controls(hide=True))
    env.reset(seed=0)
    env.step(_good(env.agents))
    with pytest.raises(EnvContractError, match=r"no observation for live agent 'dial_0'"):
        env.step(_good(env.agents))


def test_an_agent_observed_without_acting_or_ending_is_left_out_at_every_step(caplog):
    env = ParallelPettingZooEnv(Controls(ghost=True, length=6))
    env.reset(seed=0)
    for _ in range(5):
        agents = list(env.agents)
        raw = env.env
        obs, _, _, _, infos = env.step(_good(agents))
        assert "ghost_0" not in obs and infos.keys() <= obs.keys()
        assert set(obs) == set(agents)  # the acting agents, slider_0 included at the step it ends
        assert "ghost_0" in raw._last_obs_keys
    assert caplog.text.count("neither act nor end") == 5


def test_infos_for_keys_that_are_not_agents_move_under_common_at_every_step():
    env = ParallelPettingZooEnv(Controls(stats=True))
    env.reset(seed=0)
    for t in range(1, 5):
        obs, _, _, _, infos = env.step(_good(env.agents))
        assert infos[COMMON] == {"stats": {"t": t}} and infos.keys() - {COMMON} == obs.keys()
