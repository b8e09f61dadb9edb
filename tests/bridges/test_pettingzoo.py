"""Semantics of the PettingZoo bridges: masks from info, rewards at the right time, bad input.

Two small PettingZoo envs written here exercise what the stock envs do not: action masks in
``info``, different spaces per agent, rewards to agents that are not acting and during dead steps,
an agent that ends while the others play on, and infos for keys that are not agents.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.classic.tictactoe import tictactoe
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.env import AECEnv, ParallelEnv

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv, to_aec
from marl_core.conformance import check_env
from marl_core.env import ALL, COMMON
from marl_core.errors import (
    EnvContractError,
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    SpaceError,
    UnexpectedActionError,
    UnknownAgentError,
)
from marl_core.rollout import RandomPolicy, rollout
from marl_core.spaces import sample_action

api_warnings = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test")


class TurnsWithInfoMasks(AECEnv):
    """Alice and Bob take turns; legal actions come in ``info["action_mask"]``.

    Each move pays the mover ``action / 10`` and the other player 0.5; an illegal move costs 1.
    Alice ends after her third move and Bob plays on alone; when Alice's dead step comes, Bob
    gets 1.0 during it. The game ends after Bob's fifth move.
    """

    metadata = {"name": "turns_with_info_masks_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode
        self.possible_agents = ["alice_0", "bob_0"]
        self._observation_spaces = {
            "alice_0": spaces.Box(0.0, 10.0, (2,), np.float32),
            "bob_0": spaces.Discrete(20),
        }
        self._action_spaces = {"alice_0": spaces.Discrete(4), "bob_0": spaces.Discrete(3)}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent]

    def _mask(self, agent: str) -> np.ndarray:
        mask = np.zeros(self._action_spaces[agent].n, dtype=np.int8)
        mask[self.rng.choice(len(mask), size=2, replace=False)] = 1
        return mask

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.moves = dict.fromkeys(self.agents, 0)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"action_mask": self._mask(a), "turn": 0} for a in self.agents}
        self.agent_selection = "alice_0"

    def observe(self, agent: str) -> Any:
        if agent == "alice_0":
            return np.array([self.moves["alice_0"], self.moves["bob_0"]], dtype=np.float32)
        return np.int64(sum(self.moves.values()))

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        other = "bob_0" if agent == "alice_0" else "alice_0"
        self._clear_rewards()
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError("a dead agent's action must be None")
            for table in (self.rewards, self._cumulative_rewards, self.terminations, self.truncations, self.infos):
                del table[agent]
            self.agents.remove(agent)
            for alive in self.agents:
                self.rewards[alive] = 1.0
            self._accumulate_rewards()
            self.agent_selection = other
            return
        self._cumulative_rewards[agent] = 0.0
        legal = bool(self.infos[agent]["action_mask"][action])
        self.moves[agent] += 1
        self.rewards[agent] = float(action) / 10 if legal else -1.0
        if other in self.agents:
            self.rewards[other] = 0.5
        if agent == "alice_0" and self.moves[agent] == 3:
            self.terminations[agent] = True
        if self.moves["bob_0"] == 5:
            self.terminations = dict.fromkeys(self.agents, True)
        for alive in self.agents:
            self.infos[alive] = {"action_mask": self._mask(alive), "turn": sum(self.moves.values())}
        self.agent_selection = other if other in self.agents else agent
        self._accumulate_rewards()

    def render(self) -> str:
        return f"moves: {self.moves}"

    def close(self) -> None:
        pass


class SimultaneousWithInfoMasks(ParallelEnv):
    """Three agents with different spaces move together for four steps; masks come in infos.

    ``scout_0`` terminates after step 2 (with a final observation). Infos also carry ``"stats"``,
    a key that is not an agent. The dicts returned last are kept, to check nobody changed them.
    """

    metadata = {"name": "simultaneous_with_info_masks_v0", "render_modes": ["ansi"]}

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.possible_agents = ["scout_0", "walker_0", "walker_1"]
        self._obs = {
            "scout_0": spaces.Box(-1.0, 1.0, (3,), np.float32),
            "walker_0": spaces.Box(-1.0, 1.0, (5,), np.float32),
            "walker_1": spaces.Box(-1.0, 1.0, (5,), np.float32),
        }
        self._act = {"scout_0": spaces.Discrete(2), "walker_0": spaces.Discrete(5), "walker_1": spaces.Discrete(5)}
        self.returned: tuple[dict, ...] = ()
        self.snapshot: tuple[dict, ...] = ()

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act[agent]

    def _observe(self) -> tuple[dict, dict]:
        obs = {a: self.rng.uniform(-1, 1, self._obs[a].shape).astype(np.float32) for a in self.agents}
        infos: dict[str, Any] = {}
        for agent_id in self.agents:
            mask = np.ones(self._act[agent_id].n, dtype=np.int8)
            mask[self.rng.integers(len(mask))] = 0
            infos[agent_id] = {"action_mask": mask}
        infos["stats"] = {"t": self.t}
        return obs, infos

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.returned = self._observe()
        self.snapshot = copy.deepcopy(self.returned)
        return self.returned

    def step(self, actions: dict) -> tuple[dict, ...]:
        self.t += 1
        rewards = {a: float(actions[a]) for a in self.agents}
        terminations = {a: self.t >= 4 or (a == "scout_0" and self.t == 2) for a in self.agents}
        truncations = dict.fromkeys(self.agents, False)
        obs, infos = self._observe()
        self.agents = [a for a in self.agents if not terminations[a]]
        self.returned = (obs, rewards, terminations, truncations, infos)
        self.snapshot = copy.deepcopy(self.returned)
        return self.returned

    def render(self) -> str:
        return f"t={self.t}"


def _raw_turns_with_info_masks(seed: int) -> tuple[list, dict]:
    env = TurnsWithInfoMasks()
    env.reset(seed=seed)
    rng = RandomPolicy.rng_for(seed)  # as RandomPolicy(env, seed) draws
    trace, returns = [], {}
    for agent_id in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        trace.append((agent_id, observation, info["action_mask"]))
        returns[agent_id] = returns.get(agent_id, 0.0) + reward
        action = None if terminated or truncated else sample_action(env.action_space(agent_id), rng, info["action_mask"])
        env.step(action)
    return trace, returns


def test_masks_move_from_info_into_the_observation_and_rewards_keep_their_sums():
    env = PettingZooEnv(TurnsWithInfoMasks())
    assert env.get_observation_space("alice_0") == spaces.Dict(
        {"observation": spaces.Box(0.0, 10.0, (2,), np.float32), "action_mask": spaces.Box(0, 1, (4,), np.int8)}
    )
    assert env.get_observation_space("bob_0")["observation"] == spaces.Discrete(20)
    for seed in range(5):
        raw_trace, raw_returns = _raw_turns_with_info_masks(seed)
        trace, returns = [], {}
        for transition in _play(env, seed):
            for agent_id, observation in transition.obs.items():
                trace.append((agent_id, observation["observation"], observation["action_mask"]))
                assert "action_mask" not in transition.infos[agent_id]
                assert transition.infos[agent_id]["turn"] >= 0
            for agent_id, reward in transition.rewards.items():
                returns[agent_id] = returns.get(agent_id, 0.0) + reward
        assert data_equivalence(trace, raw_trace)
        assert returns == pytest.approx(raw_returns)
    assert "action_mask" in env.env.infos.get("bob_0", {"action_mask": 1})  # the env's own infos untouched


class TurnsWithAWrongSizedMask(TurnsWithInfoMasks):
    """Bob's info mask has 5 entries, for his 3 actions."""

    def _mask(self, agent: str) -> np.ndarray:
        return np.ones(5 if agent == "bob_0" else 4, dtype=np.int8)


def test_an_info_mask_that_is_not_one_0_or_1_per_action_is_named_and_masks_are_the_bridges_own():
    # Taken as it was, the mask left Bob's observation outside its space and no action was checked.
    env = PettingZooEnv(TurnsWithAWrongSizedMask())
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"agent 'bob_0' got an action_mask of shape \(5,\), but its action space Discrete\(3\) needs \(3,\) in its info"):
        env.step({"alice_0": 0})
    # A well-formed mask is copied: writing into the observation's leaves the env's info as it was.
    env = PettingZooEnv(TurnsWithInfoMasks())
    obs, _ = env.reset(seed=0)
    obs["alice_0"]["action_mask"][:] = 7
    assert set(env.env.infos["alice_0"]["action_mask"].tolist()) == {0, 1}


class SpawnsAnAgentWithInfoMasks(ParallelEnv):
    """``a`` from the start, ``b`` from the first step on: both get ``info["action_mask"]``."""

    metadata = {"name": "spawns_an_agent_with_info_masks_v0"}
    possible_agents = ["a"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 1.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _infos(self) -> dict:
        return {agent: {"action_mask": np.array([1, 0, 0], np.int8)} for agent in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents = ["a"]
        return {"a": np.zeros(2, np.float32)}, self._infos()

    def step(self, actions):
        self.agents = ["a", "b"]
        obs = {agent: np.zeros(2, np.float32) for agent in self.agents}
        flags = dict.fromkeys(self.agents, False)
        return obs, dict.fromkeys(self.agents, 0.0), flags, dict(flags), self._infos()


def test_an_agent_generated_during_the_episode_gets_its_info_mask_moved_too():
    # Its mask stayed in its info, its observation was not a Dict and a masked action reached the env.
    env = ParallelPettingZooEnv(SpawnsAnAgentWithInfoMasks())
    env.reset(seed=0)
    early = env.get_observation_space("b")  # asked before its first observation: the same form
    obs, _, _, _, infos = env.step({"a": 0})
    assert early == env.get_observation_space("b")
    assert obs["b"]["action_mask"].tolist() == [1, 0, 0] and "action_mask" not in infos["b"]
    assert env.get_observation_space("b") == env.get_observation_space("a")
    assert env.get_observation_space("b").contains(obs["b"])
    with pytest.raises(IllegalActionError, match="agent 'b': received 2"):
        env.step({"a": 0, "b": 2})


class SpawnsAnAgentWithoutSpaces(SpawnsAnAgentWithInfoMasks):
    """``b`` appears once, ended, and the env knows no space for it."""

    def observation_space(self, agent: str) -> spaces.Space:
        if agent != "a":
            raise KeyError(agent)
        return super().observation_space(agent)

    def action_space(self, agent: str) -> spaces.Space:
        if agent != "a":
            raise KeyError(agent)
        return super().action_space(agent)

    def step(self, actions):
        obs = {agent: np.zeros(2, np.float32) for agent in ("a", "b")}
        flags = {"a": False, "b": True}
        self.agents = ["a"]
        return obs, dict.fromkeys(obs, 0.0), flags, dict.fromkeys(obs, False), {"a": {"action_mask": np.ones(3, np.int8)}}


def test_an_agent_without_spaces_in_an_env_with_info_masks_steps_as_before():
    # Looking for its mask asked the env for its spaces: step() raised UnknownAgentError or KeyError.
    env = ParallelPettingZooEnv(SpawnsAnAgentWithoutSpaces())
    env.reset(seed=0)
    obs, _, terminateds, _, _ = env.step({"a": 0})
    assert terminateds["b"] is True and obs["b"].shape == (2,) and "action_mask" in obs["a"]


class JoinsWithItsActionSpace(SpawnsAnAgentWithInfoMasks):
    """``b`` has an observation space from the start, and an action space once it has joined."""

    def action_space(self, agent: str) -> spaces.Space:
        if agent == "b" and "b" not in getattr(self, "agents", ()):
            raise KeyError(agent)
        return super().action_space(agent)


def test_an_agent_whose_action_space_comes_when_it_joins_gets_its_mask_moved_then():
    # Asked before it joined, its missing action space was taken as "no mask" for good.
    env = ParallelPettingZooEnv(JoinsWithItsActionSpace())
    env.reset(seed=0)
    env.get_observation_space("b")
    obs, _, _, _, infos = env.step({"a": 0})
    assert obs["b"]["action_mask"].tolist() == [1, 0, 0] and "action_mask" not in infos["b"]
    with pytest.raises(IllegalActionError, match="agent 'b': received 2"):
        env.step({"a": 0, "b": 2})


def _play(env: Any, seed: int) -> list:
    from marl_core.rollout import play

    return list(play(env, seed=seed))


def test_rewards_reach_agents_when_they_happen_including_dead_steps():
    env = PettingZooEnv(TurnsWithInfoMasks())
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["alice_0"]
    steps = []
    while True:
        acting = [a for a in obs if not (steps and (steps[-1][2].get(a) or steps[-1][3].get(a)))]
        actions = {a: int(np.flatnonzero(obs[a]["action_mask"])[0]) for a in acting}
        result = env.step(actions)
        steps.append((actions, *result[1:4], list(result[0])))
        obs = result[0]
        if result[2][ALL]:
            break
    # Alice's third move ends her; her final observation comes when PettingZoo gives her last turn,
    # which is after Bob's next move; Bob's 1.0 from that dead step arrives in the same step.
    fourth_actions, rewards, terminateds, _, observed = steps[5]
    assert list(fourth_actions) == ["bob_0"] and observed == ["alice_0", "bob_0"]
    assert terminateds["alice_0"] and not terminateds["bob_0"]
    assert rewards["bob_0"] == pytest.approx(fourth_actions["bob_0"] / 10 + 1.0)
    assert rewards["alice_0"] == 0.5  # paid while she was not acting
    assert steps[-1][2] == {"bob_0": True, ALL: True} and steps[-1][3] == {"bob_0": False, ALL: False}
    with pytest.raises(ResetNeededError):
        env.step({"bob_0": 0})


class EndedAtReset(AECEnv):
    """``a`` is terminated from the start and selected first: PettingZoo's first turn is its dead
    step, in which the others earn ``dead_reward``; ``b`` earns 0.25 at reset; ``b`` and ``c`` then
    take turns, each earning 1 per turn, for four turns."""

    metadata = {"name": "ended_at_reset", "is_parallelizable": False, "render_modes": []}

    def __init__(self, dead_reward: float = 0.5) -> None:
        self.possible_agents = ["a", "b", "c"]
        self.dead_reward = dead_reward
        self.render_mode = None

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0.0, 10.0, (1,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def observe(self, agent: str) -> np.ndarray:
        return np.array([self.t], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.t = 0
        self.agents = list(self.possible_agents)
        self.rewards = {"a": 0.0, "b": 0.25, "c": 0.0}
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = {agent: agent == "a" for agent in self.agents}
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {"who": agent} for agent in self.agents}
        self.agent_selection = "a"

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            if self.agents:
                self.agent_selection = self.agents[0]
            for other in self.agents:
                self.rewards[other] = self.dead_reward
            self._accumulate_rewards()
            return
        self._cumulative_rewards[agent] = 0.0
        self.t += 1
        self._clear_rewards()
        for other in self.agents:
            self.rewards[other] = 1.0
        if self.t >= 4:
            for other in self.agents:
                self.terminations[other] = True
        self._accumulate_rewards()
        self.agent_selection = self.agents[(self.agents.index(agent) + 1) % len(self.agents)]


def _raw_returns(env: Any, seed: int) -> dict:
    """Each agent's sum of what ``last()`` reports to it in PettingZoo's own loop (first legal actions)."""
    env.reset(seed=seed)
    returns: dict = {}
    for agent_id in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        returns[agent_id] = returns.get(agent_id, 0.0) + reward
        mask = info.get("action_mask") if isinstance(info, dict) else None
        if isinstance(observation, dict):
            mask = observation.get("action_mask", mask)
        env.step(None if terminated or truncated else int(np.flatnonzero(mask)[0]) if mask is not None else 0)
    return returns


def _bridged_returns(env: PettingZooEnv, seed: int) -> tuple[dict, list]:
    obs, _ = env.reset(seed=seed)
    returns: dict = {}
    seen = [list(obs)]
    ended: set = set()
    while True:
        actions = {a: int(np.flatnonzero(o["action_mask"])[0]) if isinstance(o, dict) else 0
                   for a, o in obs.items() if a not in ended}
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        seen.append((list(obs), {a: f for a, f in terminateds.items() if f}))
        ended |= {a for a in obs if terminateds.get(a) or truncateds.get(a)}
        for agent_id, reward in rewards.items():
            returns[agent_id] = returns.get(agent_id, 0.0) + reward
        if terminateds[ALL] or truncateds[ALL]:
            return returns, seen


def test_an_agent_ended_at_reset_and_rewards_paid_at_reset_reach_the_first_step():
    # reset() made the ended agent's dead step and dropped its rewards; the ended agent was in
    # reset's obs dict, as if it had to act, and never flagged.
    env = PettingZooEnv(EndedAtReset())
    obs, infos = env.reset(seed=0)
    assert list(obs) == ["b"] and "a" not in infos
    obs, rewards, terminateds, truncateds, infos = env.step({"b": 0})
    assert terminateds["a"] and not truncateds["a"] and float(obs["a"][0]) == 0.0  # its final observation
    assert infos["a"] == {"who": "a"}
    assert rewards == pytest.approx({"b": 0.25 + 0.5 + 1.0, "c": 0.5 + 1.0})  # reset's, a's dead step's, b's turn's
    returns, _ = _bridged_returns(PettingZooEnv(EndedAtReset()), 0)
    assert returns == pytest.approx({a: r for a, r in _raw_returns(EndedAtReset(), 0).items() if r})
    assert check_env(lambda: PettingZooEnv(EndedAtReset())).ok


def test_bad_actions_raise_clear_errors_and_leave_the_env_unchanged():
    env = PettingZooEnv(tictactoe.env())
    env.reset(seed=0)
    with pytest.raises(UnexpectedActionError, match=r"'player_2' which is not expected to act \(acting now: \['player_1'\]\)"):
        env.step({"player_2": 0})
    with pytest.raises(MissingActionError, match="player_1"):
        env.step({})
    with pytest.raises(InvalidActionError, match=r"invalid action for agent 'player_1'.*9"):
        env.step({"player_1": 9})
    with pytest.raises(InvalidActionError, match="player_1"):
        env.step({"player_1": 1.0})
    env.step({"player_1": 4})
    with pytest.raises(IllegalActionError, match=r"agent 'player_2': received 4, legal actions now: \[0, 1, 2, 3, 5, 6, 7, 8\]"):
        env.step({"player_2": 4})
    # Nothing changed: the game goes on exactly as a fresh one with the same moves.
    fresh = PettingZooEnv(tictactoe.env())
    fresh.reset(seed=0)
    fresh.step({"player_1": 4})
    assert data_equivalence(env.step({"player_2": 0}), fresh.step({"player_2": 0}))


def test_masked_actions_can_reach_the_env_when_legality_checks_are_off():
    env = PettingZooEnv(tictactoe.env(), check_legal=False)
    env.reset(seed=0)
    env.step({"player_1": 4})
    _, rewards, terminateds, _, _ = env.step({"player_2": 4})  # PettingZoo ends the game on it
    assert terminateds[ALL] and rewards["player_2"] == -1
    unchecked = PettingZooEnv(tictactoe.env(), check_legal=False)
    unchecked.reset(seed=0)
    with pytest.raises(InvalidActionError):  # outside the space is still an error
        unchecked.step({"player_1": 12})


def test_masks_in_any_mapping_observation_are_enforced():
    from collections import OrderedDict

    from pettingzoo.utils.wrappers import BaseWrapper

    class OrderedObservations(BaseWrapper):
        def observe(self, agent):
            return OrderedDict(super().observe(agent))

    env = PettingZooEnv(OrderedObservations(tictactoe.env()))
    env.reset(seed=0)
    env.step({"player_1": 4})
    with pytest.raises(IllegalActionError, match="'player_2': received 4"):
        env.step({"player_2": 4})
    assert env.env.unwrapped.board.squares[4] == 1 and env.env.agent_selection == "player_2"


class _TupleMaskDuel(ParallelEnv):
    """Two agents, one step, MultiDiscrete([2, 3]) actions; each observation holds its mask in
    gymnasium's form, a tuple of one array per dimension (of different lengths)."""

    metadata = {"name": "tuple_mask_duel_v0"}
    possible_agents = ["a", "b"]
    MASK = (np.array([1, 0], np.int8), np.array([0, 1, 1], np.int8))

    def observation_space(self, agent):
        return spaces.Dict({"observation": spaces.Box(0, 1, (1,), np.float32),
                            "action_mask": spaces.Tuple((spaces.MultiBinary(2), spaces.MultiBinary(3)))})

    def action_space(self, agent):
        return spaces.MultiDiscrete([2, 3])

    def _obs(self):
        return {a: {"observation": np.zeros(1, np.float32), "action_mask": self.MASK} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        obs = self._obs()
        self.agents = []
        return obs, dict.fromkeys(obs, 1.0), dict.fromkeys(obs, True), dict.fromkeys(obs, False), {a: {} for a in obs}


def test_a_multidiscrete_mask_in_gymnasiums_tuple_form_is_enforced_per_dimension():
    # numpy could not make one array of the tuple: reset() raised a bare ValueError.
    env = ParallelPettingZooEnv(_TupleMaskDuel())
    obs, _ = env.reset(seed=0)
    assert obs["a"]["action_mask"] is _TupleMaskDuel.MASK  # the observation as the env gave it
    with pytest.raises(IllegalActionError, match=r"'b': received array\(\[1, 1\]\), legal actions now: \[\[0\], \[1, 2\]\]"):
        env.step({"a": np.array([0, 1]), "b": np.array([1, 1])})
    _, rewards, terminateds, _, _ = env.step({"a": np.array([0, 1]), "b": np.array([0, 2])})
    assert rewards == {"a": 1.0, "b": 1.0} and terminateds[ALL]
    from marl_core.ppo import PPOConfig  # the trainer takes flat masks only: said, with the form it takes

    with pytest.raises(SpaceError, match=r"an action_mask space Tuple\(MultiBinary\(2\), MultiBinary\(3\)\) does not "
                                         r"fit MultiDiscrete\(\[2 3\]\): the trainer takes a flat mask of shape \(5,\)"):
        PPOConfig().environment(lambda config: ParallelPettingZooEnv(_TupleMaskDuel())).build()


def test_step_before_reset_and_options_and_seeds_reach_the_env():
    env = PettingZooEnv(TurnsWithInfoMasks(), mask_in_info=True)
    with pytest.raises(ResetNeededError, match="reset"):
        env.step({"alice_0": 0})
    assert env.agents == []
    first = _play(env, 11)
    second = _play(env, 11)
    assert data_equivalence([t.obs for t in first], [t.obs for t in second])
    assert env.agents == []
    plain = PettingZooEnv(TurnsWithInfoMasks(), mask_in_info=False)
    obs, infos = plain.reset(seed=3)
    assert isinstance(obs["alice_0"], np.ndarray) and "action_mask" in infos["alice_0"]
    assert plain.agents == ["alice_0", "bob_0"]


def test_render_and_render_mode_pass_through():
    env = PettingZooEnv(TurnsWithInfoMasks(render_mode="ansi"))
    env.reset(seed=0)
    env.step({"alice_0": int(np.flatnonzero(env.env.infos["alice_0"]["action_mask"])[0])})
    assert env.render_mode == "ansi"
    assert env.render() == "moves: {'alice_0': 1, 'bob_0': 0}"
    parallel = ParallelPettingZooEnv(SimultaneousWithInfoMasks(render_mode="ansi"))
    parallel.reset(seed=0)
    assert parallel.render_mode == "ansi" and parallel.render() == "t=0"
    assert "PettingZooEnv<turns_with_info_masks_v0>" in str(env)


def test_parallel_bridge_moves_masks_keeps_infos_and_never_changes_the_envs_dicts():
    raw = SimultaneousWithInfoMasks()
    env = ParallelPettingZooEnv(raw)
    assert env.get_observation_space("walker_0")["action_mask"] == spaces.Box(0, 1, (5,), np.int8)
    obs, infos = env.reset(seed=4)
    assert data_equivalence(raw.returned, raw.snapshot)
    assert infos[COMMON] == {"stats": {"t": 0}} and "stats" not in obs
    for step in range(1, 5):
        actions = {a: int(np.flatnonzero(o["action_mask"])[-1]) for a, o in obs.items() if a in env.agents}
        result = env.step(actions)
        assert data_equivalence(raw.returned, raw.snapshot)  # what the env returned is as it was
        obs, rewards, terminateds, truncateds, infos = result
        assert rewards is raw.returned[1]
        assert ALL not in raw.returned[2] and ALL not in raw.returned[3]
        for agent_id, observation in obs.items():
            assert np.array_equal(observation["action_mask"], raw.returned[4][agent_id]["action_mask"])
            assert "action_mask" not in infos[agent_id]
        if step == 2:
            assert terminateds["scout_0"] and "scout_0" in obs and env.agents == ["walker_0", "walker_1"]
    assert terminateds[ALL] and not truncateds[ALL]
    with pytest.raises(ResetNeededError):
        env.step({})


def test_parallel_bad_actions_raise_and_leave_the_env_unchanged():
    env = ParallelPettingZooEnv(SimultaneousWithInfoMasks())
    with pytest.raises(ResetNeededError):
        env.step({"scout_0": 0})
    obs, _ = env.reset(seed=1)
    good = {a: int(np.flatnonzero(o["action_mask"])[0]) for a, o in obs.items()}
    blocked = {a: int(np.flatnonzero(o["action_mask"] == 0)[0]) for a, o in obs.items()}
    with pytest.raises(UnexpectedActionError, match="'ghost_0'"):
        env.step({**good, "ghost_0": 1})
    with pytest.raises(MissingActionError, match=r"\['walker_1'\]"):
        env.step({a: v for a, v in good.items() if a != "walker_1"})
    with pytest.raises(InvalidActionError, match="agent 'scout_0'"):
        env.step({**good, "scout_0": 2})
    with pytest.raises(IllegalActionError, match="agent 'walker_0'"):
        env.step({**good, "walker_0": blocked["walker_0"]})
    assert env.env.t == 0
    fresh = ParallelPettingZooEnv(SimultaneousWithInfoMasks())
    fresh.reset(seed=1)
    assert data_equivalence(env.step(good), fresh.step(good))


def test_to_aec_gives_back_the_wrapped_aec_env():
    raw = TurnsWithInfoMasks()
    assert to_aec(PettingZooEnv(raw)) is raw


@api_warnings
def test_own_envs_pass_pettingzoo_api_tests_and_the_checker():
    api_test(TurnsWithInfoMasks(), num_cycles=50)
    parallel_api_test(SimultaneousWithInfoMasks(), num_cycles=10)
    assert check_env(lambda: PettingZooEnv(TurnsWithInfoMasks()), episodes=3).ok
    report = check_env(lambda: ParallelPettingZooEnv(SimultaneousWithInfoMasks()), episodes=3)
    assert report.ok, report.errors


def test_rollout_through_the_bridge_credits_every_reward():
    result = rollout(PettingZooEnv(TurnsWithInfoMasks()), seed=2)
    _, raw_returns = _raw_turns_with_info_masks(2)
    assert result.returns == pytest.approx(raw_returns)
    assert result.lengths == {"alice_0": 3, "bob_0": 5} and result.terminated


def test_reset_seed_also_seeds_the_bridges_own_generator():
    from gymnasium.utils import seeding

    for bridge, make in ((PettingZooEnv, TurnsWithInfoMasks), (ParallelPettingZooEnv, SimultaneousWithInfoMasks)):
        env = bridge(make())
        env.reset(seed=8)
        drawn = env.np_random.integers(1 << 30, size=4)
        assert env.np_random_seed == 8
        assert np.array_equal(drawn, seeding.np_random(8)[0].integers(1 << 30, size=4))
        env.reset()  # no seed: the generator goes on
        assert not np.array_equal(env.np_random.integers(1 << 30, size=4), drawn)


class NoneWhenDead(AECEnv):
    """A native AEC env whose ``observe()`` is None for an agent that has ended (PettingZoo types
    it ``ObsType | None``). ``b`` ends at the first move, with an info; ``a`` plays three moves.
    Live agents carry their action mask in ``info``."""

    metadata = {"name": "none_when_dead_v0", "is_parallelizable": False}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b"]
        self._obs_space = spaces.Box(0.0, 9.0, (1,), np.float32)
        self._act_space = spaces.Discrete(2)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def observe(self, agent):
        return None if self.terminations[agent] else np.full(1, self.t, np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"action_mask": np.ones(2, np.int8)} for a in self.agents}
        self.agent_selection = "a"

    def step(self, action):
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self.t += 1
        self._cumulative_rewards["a"] = 0
        self.rewards = dict.fromkeys(self.agents, 0)
        self.rewards["a"] = 1
        if self.t == 1:
            self.terminations["b"] = True
            self.infos["b"] = {"tag": "b"}
        if self.t >= 3:
            self.terminations["a"] = True
        self._accumulate_rewards()
        self.agent_selection = "a"
        self._deads_step_first()


def test_an_agent_without_a_final_observation_ends_without_one():
    # A final observation of None went out (wrapped in a Dict with its info mask, too): outside
    # the agent's space, a checker error on every such env.
    env = PettingZooEnv(NoneWhenDead(), mask_in_info=True)
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["a"] and obs["a"]["action_mask"].tolist() == [1, 1]
    obs, rewards, terminateds, _, infos = env.step({"a": 0})
    assert list(obs) == ["a"] and terminateds["b"] is True and terminateds[ALL] is False
    assert infos[COMMON] == {"b": {"tag": "b"}} and "b" not in infos  # its info is kept, under "__common__"
    env.step({"a": 0})
    obs, rewards, terminateds, _, _ = env.step({"a": 0})
    assert obs == {} and rewards == {"a": 1} and terminateds == {"a": True, ALL: True}
    report = check_env(lambda: PettingZooEnv(NoneWhenDead(), mask_in_info=True))
    assert report.ok, report
    assert rollout(PettingZooEnv(NoneWhenDead(), mask_in_info=True), seed=0).returns == {"a": 3.0, "b": 0.0}


class Spawning(ParallelEnv):
    """Agent ``late_0``, outside ``possible_agents``, joins at step 1; every name gets the same spaces."""

    metadata = {"name": "spawning_v0"}
    possible_agents = ["first_0"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(4)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = ["first_0"]
        return {"first_0": 0}, {}

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        self.agents = ["first_0", "late_0"]
        flags = dict.fromkeys(self.agents, False)
        return dict.fromkeys(self.agents, 1), dict.fromkeys(self.agents, 0.0), flags, dict(flags), {}


def test_spaces_of_unknown_agents_are_refused_and_only_agents_that_joined_are_kept():
    # An id the env does not know was the env's bare KeyError.
    strict = Spawning()
    strict.observation_space = {"first_0": spaces.Discrete(4)}.__getitem__  # type: ignore[method-assign]
    strict.action_space = {"first_0": spaces.Discrete(2)}.__getitem__  # type: ignore[method-assign]
    for env in (PettingZooEnv(tictactoe.env()), ParallelPettingZooEnv(strict, mask_in_info=False)):
        for method, kind in ((env.get_observation_space, "observation"), (env.get_action_space, "action")):
            with pytest.raises(UnknownAgentError, match=rf"unknown agent id \(no {kind} space\) 'player_9'; known: "
                                                        rf"\[{', '.join(repr(a) for a in env.possible_agents)}\]"):
                method("player_9")
    # An env answering for any name: a misspelled id got a space and joined the env's spaces for good.
    env = ParallelPettingZooEnv(Spawning())
    env.reset(seed=0)
    for agent_id in ("frist_0", "late_0"):  # late_0 has not joined yet
        assert env.get_observation_space(agent_id) == spaces.Discrete(4)
        assert env.get_action_space(agent_id) == spaces.Discrete(2)
    assert list(env.observation_spaces) == list(env.action_spaces) == ["first_0"]
    env.step({"first_0": 1})
    assert env.get_observation_space("late_0") == spaces.Discrete(4) and env.get_action_space("late_0")
    assert list(env.observation_spaces) == list(env.action_spaces) == ["first_0", "late_0"]


class Blip(Spawning):
    """``blip_0`` is observed at step 1 only, in the step it ends (it never acts)."""

    def step(self, actions: dict[str, Any]) -> tuple[dict, ...]:
        self.agents = ["first_0"]
        return ({"first_0": 1, "blip_0": 2}, {"first_0": 0.0, "blip_0": 5.0}, {"first_0": False, "blip_0": True},
                {"first_0": False, "blip_0": False}, {})


def test_an_agent_that_appears_in_the_step_it_ends_keeps_its_final_observation_and_flags(caplog):
    env = ParallelPettingZooEnv(Blip(), mask_in_info=False)
    env.reset(seed=0)
    obs, rewards, terminateds, truncateds, _ = env.step({"first_0": 0})
    assert obs == {"first_0": 1, "blip_0": 2} and rewards == {"first_0": 0.0, "blip_0": 5.0}
    assert terminateds == {"first_0": False, "blip_0": True, ALL: False}
    assert truncateds == {"first_0": False, "blip_0": False, ALL: False}
    assert "neither act nor end" not in caplog.text


def test_the_space_of_an_agent_outside_possible_agents_before_reset_is_the_envs():
    # PettingZoo's envs have no agents before reset: reading them was an AttributeError.
    env = ParallelPettingZooEnv(Spawning(), mask_in_info=False)
    assert not hasattr(env.env, "agents")
    assert env.get_observation_space("late_0") == spaces.Discrete(4) and "late_0" not in env.observation_spaces
