"""PettingZoo bridges at their edges: masks that appear in info only after reset, masked actions
through ``to_parallel``, action dicts that are not plain dicts, and pickling mid-episode."""

from __future__ import annotations

import logging
import pickle
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.agent_selector import AgentSelector

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv, to_parallel
from marl_core.errors import IllegalActionError, UnexpectedActionError, UnsupportedEnvError
from marl_core.spaces import mask_from_legal, masked_space
from tests.fixtures.envs import RockPaperScissors

_ONLY_0 = np.array([1, 0, 0], np.int8)


class LateMaskAEC(AECEnv):
    """Two agents taking turns; from the first step on, info says only action 0 is legal."""

    metadata = {"name": "late_mask_aec_v0", "render_modes": []}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0, 1, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def observe(self, agent: str) -> np.ndarray:
        return np.zeros(2, np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0)
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()
        self.t = 0

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self.t += 1
        self.infos = {a: {"action_mask": _ONLY_0.copy()} for a in self.agents}
        if self.t >= 4:
            self.terminations = dict.fromkeys(self.agents, True)
        self._cumulative_rewards[agent] = 0
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


class LateMaskParallel(ParallelEnv):
    """Two agents acting at once; from the first step on, info says only action 0 is legal."""

    metadata = {"name": "late_mask_parallel_v0"}

    def __init__(self, actions: tuple[int, ...] = (3, 3)) -> None:
        self.possible_agents = ["a", "b"][: len(actions)]
        self._actions = dict(zip(self.possible_agents, actions, strict=True))

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0, 10, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(self._actions[agent])

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents, self.t = list(self.possible_agents), 0
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict):
        self.t += 1
        done = self.t >= 3
        obs = {a: np.full(1, self.t, np.float32) for a in self.agents}
        rewards = {a: float(actions[a]) for a in self.agents}
        flags = dict.fromkeys(self.agents, done)
        infos = {a: {"action_mask": _ONLY_0.copy()} for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, flags, dict.fromkeys(flags, False), infos


class Quiet(LateMaskParallel):
    """LateMaskParallel without masks in info."""

    def step(self, actions: dict):
        obs, rewards, terminations, truncations, _ = super().step(actions)
        return obs, rewards, terminations, truncations, {a: {} for a in obs}


def test_a_mask_in_info_that_appears_after_reset_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    # The spaces were fixed at construction, from reset's infos: say so, and how to fix it.
    env = PettingZooEnv(LateMaskAEC())
    assert env.get_observation_space("a") == spaces.Box(0, 1, (2,), np.float32)
    env.reset(seed=0)
    with caplog.at_level(logging.WARNING, logger="bridges.pettingzoo"):
        env.step({"a": 0})
        env.step({"b": 2})
        env.step({"a": 1})
    warnings = [r.getMessage() for r in caplog.records if "mask_in_info=True" in r.getMessage()]
    assert len(warnings) == 1 and "put action masks in info for ['b']" in warnings[0]
    explicit = PettingZooEnv(LateMaskAEC(), mask_in_info=True)
    explicit.reset(seed=0)
    explicit.step({"a": 0})
    with pytest.raises(IllegalActionError, match="agent 'b': received 2, legal actions now: \\[0\\]"):
        explicit.step({"b": 2})


def test_a_parallel_mask_in_info_that_appears_after_reset_is_reported_once(caplog: pytest.LogCaptureFixture) -> None:
    env = ParallelPettingZooEnv(LateMaskParallel())
    env.reset(seed=0)
    with caplog.at_level(logging.WARNING, logger="bridges.pettingzoo"):
        for _ in range(3):
            env.step({"a": 0, "b": 0})
    warnings = [r.getMessage() for r in caplog.records if "mask_in_info=True" in r.getMessage()]
    assert len(warnings) == 1 and "for ['a', 'b']" in warnings[0]
    with caplog.at_level(logging.WARNING, logger="bridges.pettingzoo"):
        caplog.clear()
        quiet = ParallelPettingZooEnv(Quiet())
        quiet.reset(seed=0)
        quiet.step({"a": 0, "b": 0})
    assert not caplog.records


class MaskedSimultaneous(RockPaperScissors):
    """Rock-paper-scissors whose observations carry a mask allowing rock only."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__(config)
        self.observation_spaces = {a: masked_space(s, 3) for a, s in self.observation_spaces.items()}

    def _masked(self, obs: dict) -> dict:
        return {a: {"observation": o, "action_mask": mask_from_legal([0], 3)} for a, o in obs.items()}

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return self._masked(obs), infos

    def step(self, action_dict):
        obs, *rest = super().step(action_dict)
        return (self._masked(obs), *rest)


def test_to_parallel_refuses_masked_actions_unless_told_not_to() -> None:
    env = to_parallel(MaskedSimultaneous())
    env.reset(seed=0)
    with pytest.raises(IllegalActionError, match="agent 'player1': received 2, legal actions now: \\[0\\]"):
        env.step({"player1": 2, "player2": 0})
    assert env.env.num_moves == 0  # nothing stepped
    lenient = to_parallel(MaskedSimultaneous(), check_legal=False)
    lenient.reset(seed=0)
    assert lenient.step({"player1": 2, "player2": 0})[1] == {"player1": -1, "player2": 1}  # scissors lose to rock


def test_a_defaultdict_of_actions_is_checked_like_a_dict() -> None:
    # Reading a defaultdict by key adds the key: the fast path must not make up an action.
    env = ParallelPettingZooEnv(LateMaskParallel())
    env.reset(seed=0)
    env.step({"a": 0, "b": 0})  # builds the fast path
    actions: defaultdict[str, int] = defaultdict(int, {"a": 1, "stranger": 2})
    with pytest.raises(UnexpectedActionError, match="'stranger'"):
        env.step(actions)
    assert dict(actions) == {"a": 1, "stranger": 2} and env.env.t == 1
    assert env.step(defaultdict(int, {"a": 1, "b": 2}))[1] == {"a": 1.0, "b": 2.0}


@pytest.mark.parametrize("actions", [(2,), (2, 3)], ids=["one agent", "different bounds"])
def test_a_parallel_bridge_pickles_mid_episode(actions: tuple[int, ...]) -> None:
    env = ParallelPettingZooEnv(LateMaskParallel(actions), mask_in_info=False)
    obs, _ = env.reset(seed=0)
    env.step(dict.fromkeys(obs, 1))
    twin = pickle.loads(pickle.dumps(env))
    assert twin.step(dict.fromkeys(obs, 1))[1] == env.step(dict.fromkeys(obs, 1))[1] == dict.fromkeys(obs, 1.0)
    assert twin.env.t == env.env.t == 2


def test_an_env_of_the_other_api_is_refused_naming_both_and_the_right_bridge() -> None:
    from pettingzoo.butterfly.pistonball import pistonball
    from pettingzoo.classic.connect_four import connect_four

    with pytest.raises(UnsupportedEnvError, match=r"ParallelPettingZooEnv takes a PettingZoo parallel env, received the AEC "
                                                  r"env .*OrderEnforcingWrapper; wrap it with PettingZooEnv instead"):
        ParallelPettingZooEnv(connect_four.env())
    with pytest.raises(UnsupportedEnvError, match=r"PettingZooEnv takes a PettingZoo AEC env, received the parallel env "
                                                  r".*aec_to_parallel_wrapper; wrap it with ParallelPettingZooEnv instead"):
        PettingZooEnv(pistonball.parallel_env())
    with pytest.raises(UnsupportedEnvError, match=r"received marl_core.envs.RockPaperScissors, which has no .*observe"):
        PettingZooEnv(RockPaperScissors())


def test_a_duck_typed_env_with_the_methods_of_its_api_is_taken() -> None:
    # Not a subclass of ParallelEnv: the methods of the parallel API are what counts.
    class DuckParallel:
        metadata: dict = {}

        def __init__(self) -> None:
            self.possible_agents = ["a", "b"]
            self.agents: list[str] = []
            self.t = 0

        def observation_space(self, agent: str) -> spaces.Space:
            return spaces.Discrete(4)

        def action_space(self, agent: str) -> spaces.Space:
            return spaces.Discrete(2)

        def reset(self, seed: int | None = None, options: dict | None = None):
            self.agents, self.t = ["a", "b"], 0
            return {a: 0 for a in self.agents}, {a: {} for a in self.agents}

        def step(self, actions: dict):
            self.t += 1
            done = self.t >= 3
            obs = {a: self.t for a in self.agents}
            flags = dict.fromkeys(self.agents, done)
            if done:
                self.agents = []
            return obs, {a: float(actions[a]) for a in obs}, flags, dict.fromkeys(obs, False), {a: {} for a in obs}

    env = ParallelPettingZooEnv(DuckParallel(), mask_in_info=False)
    env.reset(seed=0)
    assert env.step({"a": 1, "b": 0})[1] == {"a": 1.0, "b": 0.0}


def test_a_duck_typed_aec_env_needs_no_last_method() -> None:
    # The bridge reads observe(), agent_selection and the flag dicts; last() is PettingZoo's loop's.
    from pettingzoo.classic.connect_four import connect_four

    class Proxy:
        def __init__(self) -> None:
            self._env = connect_four.env()

        def __getattr__(self, name: str) -> Any:
            if name == "last":
                raise AttributeError(name)
            return getattr(self._env, name)

    env = PettingZooEnv(Proxy())
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["player_0"] and env.step({"player_0": 3})[0].keys() == {"player_1"}


class _ShortMask(ParallelEnv):
    """Discrete(3) actions under a mask of two entries (a bug the checker's masks.valid names)."""

    metadata = {"name": "short_mask"}
    possible_agents = ["a"]
    render_mode = None

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Dict({"observation": spaces.Box(0, 1, (1,), np.float32),
                            "action_mask": spaces.Box(0, 1, (2,), np.int8)})

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _obs(self) -> dict:
        return {"a": {"observation": np.zeros(1, np.float32), "action_mask": np.ones(2, np.int8)}}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple:
        self.agents = ["a"]
        return self._obs(), {"a": {}}

    def step(self, actions: dict) -> tuple:
        self.agents = []
        return self._obs(), {"a": 1.0}, {"a": True}, {"a": False}, {"a": {}}


@pytest.mark.parametrize("api", ["parallel", "aec"])
def test_a_mask_of_the_wrong_size_is_left_to_the_full_check(api: str) -> None:
    # The fast check indexed it: a bare IndexError for action 2 (check_action does not apply such a mask).
    from pettingzoo.utils.conversions import parallel_to_aec

    env = ParallelPettingZooEnv(_ShortMask()) if api == "parallel" else PettingZooEnv(parallel_to_aec(_ShortMask()))
    env.reset(seed=0)
    _, rewards, terminateds, _, _ = env.step({"a": 2})
    assert rewards == {"a": 1.0} and terminateds["__all__"]
