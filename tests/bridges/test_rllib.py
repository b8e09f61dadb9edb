"""The RLlib bridge: from_rllib on RLlib's own envs, to_rllib checked by RLlib's own checker."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.multi_agent_env import MultiAgentEnv as RLlibMultiAgentEnv
from ray.rllib.env.multi_agent_env import make_multi_agent as rllib_make_multi_agent
from ray.rllib.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors as RLlibRPS
from ray.rllib.utils.pre_checks.env import check_multiagent_environments

from bridges.compat.rllib_cases import CASES
from bridges.rllib import RLlibEnv, RLlibMultiAgentEnvAdapter, from_rllib, string_id, to_rllib
from marl_core import ALL, MultiAgentEnv, rollout
from marl_core import make_multi_agent as marl_make_multi_agent
from marl_core.conformance import check_env
from marl_core.errors import (
    EnvContractError,
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    SpaceError,
    UnexpectedActionError,
    UnknownAgentError,
    UnsupportedEnvError,
)
from tests.fixtures import rllib_seed_envs
from tests.fixtures.envs import CORRECT_ENVS, TeamRewardAfterAnEndEnv

RUNNABLE = [case for case in CASES if case.left_out is None and not case.slow]


def _build(target: str, kwargs: dict[str, Any]) -> Any:
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)(**kwargs)


class Spy:
    """Records what an RLlib env really returned, by wrapping its bound methods on one instance."""

    def __init__(self, env: Any) -> None:
        self.steps: list[tuple[dict, tuple]] = []
        self.resets: list[tuple] = []
        step, reset = env.step, env.reset

        def spy_step(action_dict: dict) -> tuple:
            result = step(action_dict)
            self.steps.append((dict(action_dict), result))
            return result

        def spy_reset(**kwargs: Any) -> tuple:
            result = reset(**kwargs)
            self.resets.append(result)
            return result

        env.step, env.reset = spy_step, spy_reset


@pytest.mark.parametrize("case", RUNNABLE, ids=[case.id for case in RUNNABLE])
def test_rewards_pass_through_unchanged_on_rllib_examples(case: Any) -> None:
    raw = _build(case.target, dict(case.kwargs))
    spy = Spy(raw)
    env = from_rllib(raw)
    assert isinstance(env, RLlibEnv)
    result = rollout(env, seed=1, max_steps=case.max_steps or 1000)
    raw_returns: dict[str, float] = {}
    for _, (_, rewards, _, _, _) in spy.steps:
        for agent, reward in rewards.items():
            raw_returns[string_id(agent)] = raw_returns.get(string_id(agent), 0.0) + float(reward)
    assert result.returns == pytest.approx(raw_returns)
    assert result.steps == len(spy.steps)
    # Actions went to the raw env under its own ids.
    for actions, _ in spy.steps:
        assert all(string_id(agent) in env.possible_agents for agent in actions)


def test_integer_ids_become_agent_strings_and_actions_go_back_as_integers() -> None:
    raw = rllib_make_multi_agent("CartPole-v1")({"num_agents": 3})
    spy = Spy(raw)
    env = from_rllib(raw)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    obs, _ = env.reset(seed=0)
    assert sorted(obs) == env.possible_agents
    env.step({"agent_0": 0, "agent_1": 1, "agent_2": 0})
    assert spy.steps[0][0] == {0: 0, 1: 1, 2: 0}
    assert env.get_action_space("agent_1") == gym.spaces.Discrete(2)


def test_seed_envs_written_against_rllibs_class_run() -> None:
    rps = from_rllib(rllib_seed_envs.RockPaperScissors())
    result = rollout(rps, seed=0)
    assert result.steps == 10 and result.terminated
    assert result.returns["player1"] == -result.returns["player2"]
    ttt = from_rllib(rllib_seed_envs.TicTacToe())
    result = rollout(ttt, seed=0)
    assert result.terminated and result.steps >= 5  # a move on an occupied field costs -5 and passes the turn
    assert set(result.agents_seen) == {"player1", "player2"}


def test_missing_truncateds_all_means_false_and_the_source_dicts_are_not_touched() -> None:
    raw = rllib_seed_envs.RockPaperScissors()
    spy = Spy(raw)
    env = from_rllib(raw)
    env.reset(seed=0)
    obs, rewards, terminateds, truncateds, infos = env.step({"player1": 0, "player2": 1})
    raw_obs, _, raw_terminateds, raw_truncateds, raw_infos = spy.steps[0][1]
    assert truncateds == {ALL: False} and raw_truncateds == {}
    assert obs is not raw_obs and terminateds is not raw_terminateds and infos is not raw_infos
    assert rewards == {"player1": -1.0, "player2": 1.0}


def test_bad_actions_raise_before_the_rllib_env_sees_them() -> None:
    raw = RLlibRPS({})
    spy = Spy(raw)
    env = from_rllib(raw)
    env.reset(seed=0)
    with pytest.raises(UnexpectedActionError, match="'player3'"):
        env.step({"player1": 0, "player2": 0, "player3": 0})
    with pytest.raises(MissingActionError, match="'player2'"):
        env.step({"player1": 0})
    with pytest.raises(InvalidActionError, match=r"agent 'player2'.*Discrete\(3\)"):
        env.step({"player1": 0, "player2": 7})
    assert spy.steps == [] and raw.num_moves == 0


def test_turn_based_env_only_accepts_the_player_to_move() -> None:
    env = from_rllib(rllib_seed_envs.TicTacToe())
    obs, _ = env.reset(seed=0)
    (mover,) = obs
    other = "player2" if mover == "player1" else "player1"
    with pytest.raises(UnexpectedActionError, match=f"'{other}'.*acting now: \\['{mover}'\\]"):
        env.step({other: 0})


def test_step_after_the_episode_ended_raises_without_touching_the_env() -> None:
    raw = RLlibRPS({})
    spy = Spy(raw)
    env = from_rllib(raw)
    rollout(env, seed=0)
    count = len(spy.steps)
    with pytest.raises(ResetNeededError, match="RockPaperScissors"):
        env.step({"player1": 0, "player2": 0})
    assert len(spy.steps) == count
    assert env.agents == []


class _NoAllFlag(RLlibRPS):
    """Broken on purpose: terminateds without '__all__'."""

    def step(self, action_dict):
        obs, rewards, _, truncateds, infos = super().step(action_dict)
        return obs, rewards, {"player1": False}, truncateds, infos


class _CollidingIds(RLlibMultiAgentEnv):
    """Broken on purpose: ids 0 and 'agent_0' would both be 'agent_0'."""

    def __init__(self) -> None:
        super().__init__()
        self.agents = self.possible_agents = [0, "agent_0"]
        self.observation_spaces = self.action_spaces = {0: gym.spaces.Discrete(2), "agent_0": gym.spaces.Discrete(2)}


class _ComesBack(RLlibRPS):
    """Broken on purpose: player2 terminates in the first step and plays on."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step({"player2": 0, **action_dict})
        return obs, rewards, {**terminateds, "player2": self.num_moves == 1}, truncateds, infos


def test_an_agent_observed_again_after_it_ended_is_a_contract_break() -> None:
    # It was taken back into agents, and RLlib's own episodes refuse it ("already had its is_done").
    env = from_rllib(_ComesBack({}))
    env.reset(seed=0)
    _, _, terminateds, _, _ = env.step({"player1": 0, "player2": 0})
    assert terminateds["player2"] and env.agents == ["player1"]
    with pytest.raises(EnvContractError, match=r"_ComesBack observed \['player2'\] again after they ended"):
        env.step({"player1": 0})
    with pytest.raises(ResetNeededError):
        env.step({"player1": 0})
    env.reset(seed=0)  # a new episode: the same agent plays again
    assert env.step({"player1": 1, "player2": 1})[2]["player2"]


def test_the_final_observation_rllibs_episodes_require_is_warned_of_on_its_own_example() -> None:
    # GuessTheNumberGame truncates at its step limit without a final observation for agent 0,
    # which acted at the first step: RLlib's own MultiAgentEpisode refuses that episode.
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.examples.envs.classes.multi_agent.guess_the_number_game import GuessTheNumberGame
    from ray.rllib.utils.error import MultiAgentEnvError as RLlibMultiAgentEnvError

    report = check_env(lambda: from_rllib(GuessTheNumberGame({})))
    assert report.ok and report.rules == {"lifecycle.final-obs"}, str(report)
    assert "agent 'agent_0' acted and was truncated by '__all__'" in report.findings[0].message
    env = GuessTheNumberGame({})
    obs, infos = env.reset(seed=0)
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=obs, infos=infos)
    with pytest.raises(RLlibMultiAgentEnvError, match="Agent 0 acted and then got truncated, but did NOT receive a last"):
        for _ in range(1 + env.max_steps):  # agent 0 picks, then "lower than 1?" until the step limit truncates
            actions = {agent: np.array([0, 1]) for agent in obs}
            obs, rewards, terminateds, truncateds, infos = env.step(actions)
            episode.add_env_step(observations=obs, actions=actions, rewards=rewards, infos=infos,
                                 terminateds=terminateds, truncateds=truncateds)


def test_contract_breaks_of_the_rllib_env_are_named() -> None:
    env = from_rllib(_NoAllFlag({}))
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match="terminateds without '__all__'"):
        env.step({"player1": 0, "player2": 0})
    with pytest.raises(EnvContractError, match="both map to 'agent_0'"):
        from_rllib(_CollidingIds())


def test_check_env_files_a_missing_all_flag_of_an_rllib_env_under_api_all_key() -> None:
    # It was an api.step finding ("step() raised"), which --skip api.all-key did not silence,
    # while the same bug in one of our envs is api.all-key.
    report = check_env(lambda: from_rllib(_NoAllFlag({})), episodes=1)
    assert report.rules == {"api.all-key"}
    assert "step() returned terminateds without '__all__'" in report.errors[0].message
    skipped = check_env(lambda: from_rllib(_NoAllFlag({})), episodes=1, skip=["api.all-key"])
    assert skipped.findings == () and skipped.skipped_exceptions == 1  # the report says episodes were cut


class _VectorReward(RLlibRPS):
    """Broken on purpose: a multi-objective reward vector for player2."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, {**rewards, "player2": np.array([1.0, 2.0])}, terminateds, truncateds, infos


def test_a_reward_that_is_not_one_number_is_named_and_the_episode_needs_a_reset() -> None:
    # It was a bare TypeError ("only 0-dimensional arrays can be converted to Python scalars").
    env = from_rllib(_VectorReward({}))
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"_VectorReward gave agent 'player2' a reward that is not one number: "
                                               r"array\(\[1\., 2\.\]\)"):
        env.step({"player1": 0, "player2": 0})
    with pytest.raises(ResetNeededError):
        env.step({"player1": 0, "player2": 0})


@pytest.mark.parametrize("kind", ["observation", "action"])
def test_the_space_of_an_unknown_agent_is_an_unknown_agent_error(kind: str) -> None:
    # RLlib's own lookup raises a bare KeyError here.
    env = from_rllib(rllib_make_multi_agent("CartPole-v1")({"num_agents": 2}))
    with pytest.raises(UnknownAgentError, match=rf"unknown agent id \(no {kind} space\) 'agent_7'; known: \['agent_0', 'agent_1'\]"):
        getattr(env, f"get_{kind}_space")("agent_7")
    assert getattr(env, f"get_{kind}_space")("agent_1") == getattr(gym.make("CartPole-v1"), f"{kind}_space")


class _PartlyDeclaredSpaces(RLlibMultiAgentEnv):
    def __init__(self, config: Any = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_spaces = {"a": gym.spaces.Discrete(2)}
        self.action_spaces = {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(2)}


def test_an_agent_without_a_space_is_named_not_a_key_error() -> None:
    env = from_rllib(_PartlyDeclaredSpaces())  # RLlib's own lookup raised KeyError('b') here
    assert env.get_observation_space("a") == gym.spaces.Discrete(2)
    with pytest.raises(SpaceError, match="_PartlyDeclaredSpaces has no observation space for agent 'b'"):
        env.get_observation_space("b")


def test_numpy_integer_ids_become_agent_strings_too() -> None:
    raw = _PartlyDeclaredSpaces()
    raw.agents = raw.possible_agents = list(np.arange(2))
    raw.observation_spaces = raw.action_spaces = {np.int64(i): gym.spaces.Discrete(2) for i in range(2)}
    env = from_rllib(raw)
    assert env.possible_agents == ["agent_0", "agent_1"] and string_id(np.int32(4)) == "agent_4"
    assert env.get_action_space("agent_1") == gym.spaces.Discrete(2)


def test_reset_seeds_the_bridges_own_generator() -> None:
    from gymnasium.utils import seeding

    env = from_rllib(rllib_make_multi_agent("CartPole-v1")({"num_agents": 2}))
    env.reset(seed=9)
    assert env.np_random_seed == 9
    assert env.np_random.integers(1 << 30) == seeding.np_random(9)[0].integers(1 << 30)


def test_from_rllib_rejects_other_objects() -> None:
    with pytest.raises(SpaceError, match=r"needs an instance of ray.rllib.env.multi_agent_env.MultiAgentEnv") as raised:
        from_rllib(gym.make("CartPole-v1"))
    assert isinstance(raised.value, UnsupportedEnvError)  # as the exporters' and other bridges' refusals


# RLlib's checker steps with `space.sample()`, blind to action masks, so the masked fixture
# ("heterogeneous") would fail it by design; its RLlib view is checked in the test after this one.
UNMASKED = sorted(name for name in CORRECT_ENVS if name != "heterogeneous")


@pytest.mark.parametrize("name", UNMASKED)
def test_to_rllib_passes_rllibs_own_checker(name: str) -> None:
    ours = CORRECT_ENVS[name]()
    env = to_rllib(ours)
    assert isinstance(env, RLlibMultiAgentEnv)
    assert isinstance(env, RLlibMultiAgentEnvAdapter)
    assert env.unwrapped is env
    assert sorted(env.observation_spaces) == sorted(ours.possible_agents)
    check_multiagent_environments(env)


def test_to_rllib_keeps_masked_dict_observations() -> None:
    ours = CORRECT_ENVS["heterogeneous"]()
    env = to_rllib(ours)
    assert env.observation_spaces["masked"] == ours.get_observation_space("masked")
    obs, _ = env.reset(seed=0)
    actions = {a: env.get_action_space(a).sample() for a in obs}
    actions["masked"] = int(obs["masked"]["action_mask"].argmax())
    _, rewards, terminateds, truncateds, _ = env.step(actions)
    assert sorted(rewards) == sorted(ours.possible_agents)
    assert ALL in terminateds and ALL in truncateds


def test_to_rllib_copies_dicts_so_rllib_cannot_write_into_ours() -> None:
    ours = CORRECT_ENVS["simultaneous"]()
    env = to_rllib(ours)
    obs, _ = env.reset(seed=0)
    obs["intruder"] = 1
    _, _, terminateds, truncateds, _ = env.step({"player1": 0, "player2": 1})
    terminateds["player1"] = True
    assert "intruder" not in ours.reset(seed=0)[0]
    assert truncateds == {ALL: False}


def test_the_two_directions_undo_each_other() -> None:
    ours = CORRECT_ENVS["turn_based"]()
    assert from_rllib(to_rllib(ours)) is ours
    raw = RLlibRPS({})
    assert to_rllib(from_rllib(raw)) is raw
    with pytest.raises(UnsupportedEnvError, match=r"it already is an RLlib MultiAgentEnv: use it as it is"):
        to_rllib(RLlibRPS({}))


@pytest.mark.parametrize("make", [TeamRewardAfterAnEndEnv, *CORRECT_ENVS.values()])
def test_rllibs_own_episodes_take_every_reward_and_final_observation_of_to_rllib(make: Any) -> None:
    # RLlib's MultiAgentEpisode refuses data for an agent after it saw the agent end: a reward
    # paid to an ended agent crashed it ("already had its SingleAgentEpisode.is_done set to True").
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    from marl_core.spaces import sample_action_for

    source, rng = make(), np.random.default_rng(0)
    env = to_rllib(source)
    for seed in range(3):
        obs, infos = env.reset(seed=seed)
        episode = MultiAgentEpisode(observations=[obs], infos=[infos], observation_space=env.observation_spaces,
                                    action_space=env.action_spaces)
        paid: dict[str, float] = {}
        finals: dict[str, Any] = {}
        seen = set(obs)  # RLlib drops what an agent is paid before its first observation (its own rule)
        while not episode.is_done:
            acting = episode.get_agents_to_act()  # as RLlib's env runner asks them
            actions = {a: sample_action_for(env.get_action_space(a), obs[a], rng, a) for a in sorted(acting)}
            obs, rewards, terminateds, truncateds, infos = env.step(actions)
            ended = [a for a in source.possible_agents if terminateds.get(a) or truncateds.get(a)]
            finals.update({a: obs[a] for a in ended if a in obs})
            for agent, reward in rewards.items():
                if agent in seen:
                    paid[agent] = paid.get(agent, 0.0) + reward
            seen.update(obs)
            episode.add_env_step(observations=obs, actions=actions, rewards=rewards, infos=infos,
                                 terminateds=terminateds, truncateds=truncateds)
        # Every reward is in RLlib's episode, each agent's in its own.
        assert {a: ep.get_return() for a, ep in episode.agent_episodes.items()} == pytest.approx(paid)
        if make is TeamRewardAfterAnEndEnv:
            assert {a: ep.get_return() for a, ep in episode.agent_episodes.items()} == {"a": 1.0, "b": 1.5}
        for agent, final in finals.items():  # each final observation is its agent's last
            last = episode.agent_episodes[agent].get_observations(-1)
            assert np.array_equal(np.asarray(last if not isinstance(last, dict) else last["observation"]),
                                  np.asarray(final if not isinstance(final, dict) else final["observation"]))


def test_an_agent_that_ends_early_reaches_rllib_with_the_episodes_end() -> None:
    env = to_rllib(TeamRewardAfterAnEndEnv())
    env.reset(seed=0)
    obs, rewards, terminateds, _, infos = env.step({"a": 0, "b": 1})
    assert list(obs) == ["a"] and rewards == {"a": 0.0, "b": 0.5} and terminateds == {"a": False, ALL: False}
    assert infos == {} and env.agents == ["a", "b"]  # held, so still one of RLlib's agents
    obs, rewards, terminateds, truncateds, infos = env.step({"a": 0})
    assert {a: float(o[0]) for a, o in obs.items()} == {"a": 2.0, "b": 1.0} and rewards == {"a": 1.0, "b": 1.0}
    assert terminateds == {"a": True, "b": True, ALL: True} and truncateds == {"a": False, "b": False, ALL: False}
    assert infos == {"b": {"why": "out"}}
    env.reset(seed=0)
    assert env.agents == ["a", "b"] and list(env.step({"a": 0, "b": 0})[0]) == ["a"]  # nothing held from before


class _Endings(MultiAgentEnv):
    """``a`` and ``b`` act together; ``b`` ends at step 1 (``b_end``: "terminate" or "truncate",
    with its final observation if ``b_final``), ``a`` alone at step 2 and the episode ends at step 3
    (``end``: "terminate" or "truncate"; ``a_final``: with a's final observation). ``pay_b``: what
    ``b`` is paid at every step after its end; ``info_b``: an info for it at step 2; ``unpaid``:
    step 2's rewards name nobody; ``a_truncated``: ``a`` is also flagged truncated at step 3."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.config = {"b_end": "terminate", "b_final": True, "end": "terminate", "a_final": True, "pay_b": None,
                       "info_b": False, "unpaid": False, "a_truncated": False, **(config or {})}
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: gym.spaces.Box(0.0, 9.0, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: gym.spaces.Discrete(2) for x in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict: dict) -> tuple:
        config, self.t = self.config, self.t + 1
        obs = {x: np.full(1, self.t, np.float32) for x in self.agents}
        rewards = {x: 1.0 for x in action_dict}
        terminateds, truncateds, infos = {ALL: False}, {ALL: False}, {}
        if self.t == 1:
            (terminateds if config["b_end"] == "terminate" else truncateds)["b"] = True
            if not config["b_final"]:
                del obs["b"]
            self.agents = ["a"]
        elif config["pay_b"] is not None:
            rewards["b"] = config["pay_b"]
        if self.t == 2 and config["info_b"]:
            infos["b"] = {"late": True}
        if self.t == 2 and config["unpaid"]:
            rewards = {}
        if self.t == 3:
            (terminateds if config["end"] == "terminate" else truncateds)[ALL] = True
            if config["a_truncated"]:
                truncateds["a"] = True
            if not config["a_final"]:
                del obs["a"]
            self.agents = []
        return obs, rewards, terminateds, truncateds, infos


def _rllib_episode(env: Any, seed: int = 0) -> Any:
    """One episode of ``env`` recorded in RLlib's own MultiAgentEpisode, acting as RLlib's runner does."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    obs, infos = env.reset(seed=seed)
    episode = MultiAgentEpisode(observations=[obs], infos=[infos], observation_space=env.observation_spaces,
                                action_space=env.action_spaces)
    while not episode.is_done:
        actions = {a: 0 for a in sorted(episode.get_agents_to_act())}
        obs, rewards, terminateds, truncateds, infos = env.step(actions)
        episode.add_env_step(observations=obs, actions=actions, rewards=rewards, infos=infos,
                             terminateds=terminateds, truncateds=truncateds)
    return episode


@pytest.mark.parametrize("b_end", ["terminate", "truncate"])
@pytest.mark.parametrize("end", ["terminate", "truncate"])
@pytest.mark.parametrize("b_final", [True, False])
@pytest.mark.parametrize("a_final", [True, False])
def test_rllibs_episodes_keep_each_agents_own_end(b_end: str, end: str, b_final: bool, a_final: bool) -> None:
    # Held to the end, a truncated agent became terminated with a terminated episode; an agent
    # ending without a final observation crashed RLlib's episode when the episode was truncated.
    episode = _rllib_episode(to_rllib(_Endings({"b_end": b_end, "end": end, "b_final": b_final, "a_final": a_final})))
    b, a = episode.agent_episodes["b"], episode.agent_episodes["a"]
    assert (b.is_terminated, b.is_truncated) == ((True, end == "truncate") if b_end == "terminate" else (False, True))
    assert a.is_terminated == (end == "terminate") and a.is_truncated == (end == "truncate")
    assert b.get_return() == 1.0 and a.get_return() == 3.0
    # A final observation that the env did not send is the agent's last one.
    assert float(b.get_observations(-1)[0]) == (1.0 if b_final else 0.0)
    assert float(a.get_observations(-1)[0]) == (3.0 if a_final else 2.0)


def test_rllibs_episodes_take_steps_that_name_no_reward_for_an_observed_agent() -> None:
    # RLlib's episode refused them ("acted (and received next obs), but did NOT receive any
    # reward"): ours may name none, and b's last observation (filled in by the bridge) had none.
    for b_final in (True, False):
        episode = _rllib_episode(to_rllib(_Endings({"unpaid": True, "b_end": "truncate", "b_final": b_final})))
        assert episode.agent_episodes["a"].get_return() == 2.0 and episode.agent_episodes["b"].get_return() == 1.0
    env = to_rllib(_Endings({"unpaid": True}))
    env.reset(seed=0)
    env.step({"a": 0, "b": 0})
    assert env.step({"a": 0})[1] == {"a": 0.0}


@pytest.mark.parametrize("b_end", ["terminate", "truncate"])
def test_an_agent_truncated_without_a_final_observation_in_the_last_step_gets_its_last_one(b_end: str) -> None:
    # With the episode ended by terminateds["__all__"], RLlib refused a truncated without an
    # observation ("did NOT receive a last (truncation) observation").
    episode = _rllib_episode(to_rllib(_Endings({"a_truncated": True, "a_final": False, "b_end": b_end})))
    a = episode.agent_episodes["a"]
    assert a.is_truncated and float(a.get_observations(-1)[0]) == 2.0 and a.get_return() == 3.0


def test_rewards_after_an_agents_end_reach_rllib_when_it_terminated_and_are_named_when_truncated() -> None:
    episode = _rllib_episode(to_rllib(_Endings({"pay_b": 0.5, "info_b": True})))
    assert episode.agent_episodes["b"].get_return() == 2.0  # 1 for its action, 0.5 at steps 2 and 3
    assert episode.agent_episodes["b"].get_infos(-1) == {"late": True}  # held with it, not dropped
    assert _rllib_episode(to_rllib(_Endings({"b_end": "truncate", "pay_b": 0.0}))).agent_episodes["b"].get_return() == 1.0
    with pytest.raises(EnvContractError, match=r"_Endings pays agent 'b' a reward of 0\.5 after it was truncated; "
                                               r"RLlib's episodes take no data for an agent after its end"):
        _rllib_episode(to_rllib(_Endings({"b_end": "truncate", "pay_b": 0.5})))


class _OneStepGame(gym.Env):
    """A single-agent game that ends at its first step, as a Blackjack stick or a poker fold does."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return 0, {}

    def step(self, action: Any) -> tuple:
        return 1, 1.0, True, False, {}


def test_to_rllib_passes_rllibs_checker_when_agents_end_in_the_first_step() -> None:
    # RLlib reads every id of a step's dicts as one of env.agents, which was empty after the end.
    from bridges.gymnasium import from_gymnasium

    rllib_env = to_rllib(from_gymnasium(_OneStepGame()))
    check_multiagent_environments(rllib_env)
    two = to_rllib(marl_make_multi_agent(lambda config: _OneStepGame())({"num_agents": 2}))
    check_multiagent_environments(two)
    two.reset(seed=0)
    _, _, terminateds, _, _ = two.step({"agent_0": 0, "agent_1": 1})
    assert terminateds[ALL] and two.agents == ["agent_0", "agent_1"]  # until the next reset


class _FailsInItsSecondStep(RLlibRPS):
    def step(self, action_dict):
        if self.num_moves == 1:
            raise RuntimeError("the env broke")
        return super().step(action_dict)


class _BreaksItsResult(RLlibRPS):
    def step(self, action_dict):
        obs, rewards, _, truncateds, infos = super().step(action_dict)
        return obs, rewards, {"player1": False}, truncateds, infos  # no "__all__"


@pytest.mark.parametrize("source", [_FailsInItsSecondStep, _BreaksItsResult])
def test_after_a_failed_step_or_reset_the_rllib_env_is_not_stepped_again(source: Any) -> None:
    # The bridge kept the old acting agents and stepped the source env past its failure.
    env = from_rllib(source({}))
    env.reset(seed=0)
    both = {"player1": 0, "player2": 1}
    if source is _FailsInItsSecondStep:
        env.step(both)
    with pytest.raises((RuntimeError, EnvContractError)):
        env.step(both)
    moves = env.env.num_moves
    with pytest.raises(ResetNeededError, match="or after a step or reset that failed"):
        env.step(both)
    assert env.env.num_moves == moves and env.agents == []
    env.reset(seed=0)
    assert env.agents == ["player1", "player2"]
    working_reset = env.env.reset
    env.env.reset = lambda **kwargs: (_ for _ in ()).throw(RuntimeError("reset broke"))
    with pytest.raises(RuntimeError, match="reset broke"):
        env.reset(seed=1)
    with pytest.raises(ResetNeededError):  # not a step of the episode before the failed reset
        env.step(both)
    env.env.reset = working_reset


def test_numpy_integer_seeds_reach_the_rllib_env_as_python_ints() -> None:
    # gymnasium.error.Error: Seed must be a python integer.
    env = from_rllib(rllib_make_multi_agent("CartPole-v1")({"num_agents": 2}))
    obs_np, _ = env.reset(seed=np.int64(3))
    obs, _ = env.reset(seed=3)
    assert all(np.array_equal(obs_np[a], obs[a]) for a in obs)


def test_an_old_api_env_with_one_shared_space_knows_only_its_agents() -> None:
    from ray.rllib.examples.envs.classes.multi_agent.two_step_game import TwoStepGame

    env = from_rllib(TwoStepGame({}))
    assert env.get_observation_space(env.possible_agents[0]) == gym.spaces.Discrete(6)
    for unknown in ("nobody", "__all__"):
        with pytest.raises(UnknownAgentError, match=rf"unknown agent id \(no action space\) '{unknown}'"):
            env.get_action_space(unknown)


class _OldApiDictSpaces(RLlibMultiAgentEnv):
    """RLlib's old API stack: the agents are only the keys of Dict spaces; turns alternate."""

    def __init__(self, config=None):
        self.observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(3)})
        self.action_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(3)})
        super().__init__()

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {"a": 0}, {}

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 4
        obs = {"a": 0, "b": 0} if done else {("b" if "a" in action_dict else "a"): 0}
        return obs, {"a": 1.0, "b": 2.0}, {"__all__": done}, {}, {}


def test_an_old_api_env_with_per_agent_dict_spaces_declares_its_agents() -> None:
    # possible_agents was [] and grew as agents showed up; observation_spaces stayed None, so
    # check_env found ids.agents-attr and ids.known errors that were the bridge's.
    env = from_rllib(_OldApiDictSpaces())
    assert env.possible_agents == ["a", "b"]
    assert env.observation_spaces == {"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(3)}
    report = check_env(lambda: from_rllib(_OldApiDictSpaces()))
    assert report.ok and not report.warnings, report
    # A shared masked Dict space (keys that are not agents) is not read as agents.
    assert from_rllib(_SharedDictSpace()).possible_agents == []


class _SharedDictSpace(RLlibMultiAgentEnv):
    def __init__(self, config=None):
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Discrete(2),
                                                  "action_mask": gym.spaces.MultiBinary(2)})
        self.action_space = gym.spaces.Discrete(2)
        super().__init__()


class _OldApiIdSet(RLlibMultiAgentEnv):
    """RLlib's old API stack: agents declared only as an id set."""

    def __init__(self, config=None):
        self._agent_ids = {"seat_10", "seat_2", "seat_1"}
        self.observation_space = self.action_space = gym.spaces.Discrete(2)
        super().__init__()


def test_agents_from_an_old_api_id_set_come_in_the_same_order_in_every_process() -> None:
    # RLlib's MultiAgentEnv.__init__ made possible_agents list(_agent_ids), a set: the order
    # changed with PYTHONHASHSEED (so did evaluation seats and self-play sides).
    script = ("from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv\n"
              "from pettingzoo.butterfly import pistonball_v6\n"
              "from bridges.rllib import from_rllib\n"
              "from tests.bridges.test_rllib import _OldApiIdSet\n"
              "env = from_rllib(ParallelPettingZooEnv(pistonball_v6.parallel_env(n_pistons=12)))\n"
              "env.reset(seed=0)\n"
              "print(env.possible_agents == env.agents, env.possible_agents, from_rllib(_OldApiIdSet()).possible_agents)\n")
    seen = set()
    for hash_seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed}, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr[-2000:]
        seen.add(done.stdout.strip().splitlines()[-1])
    # PettingZoo's own order for its wrappers (not piston_0, piston_1, piston_10, ...); numbers by value otherwise.
    pistons = [f"piston_{i}" for i in range(12)]
    assert seen == {f"True {pistons} ['seat_1', 'seat_2', 'seat_10']"}


class _CommonObservation(RLlibRPS):
    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return {**obs, "__common__": 0}, infos


class _AllInInfos(RLlibRPS):
    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, rewards, terminateds, truncateds, {**infos, "__all__": {}}


def test_reserved_ids_outside_their_dicts_are_contract_breaks() -> None:
    # '__common__' in observations became an agent in env.agents.
    with pytest.raises(EnvContractError, match=r"_CommonObservation returned the reserved key '__common__' in its "
                                               r"reset observations; it belongs in no such dict"):
        from_rllib(_CommonObservation({})).reset(seed=0)
    env = from_rllib(_AllInInfos({}))
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"reserved key '__all__' in its infos; only '__common__' belongs there"):
        env.step({"player1": 0, "player2": 1})


class RPSWithInfos(RLlibRPS):
    """RLlib's rock-paper-scissors, telling each player in its info what it played."""

    def step(self, action_dict: dict) -> tuple:
        obs, rewards, terminateds, truncateds, _ = super().step(action_dict)
        return obs, rewards, terminateds, truncateds, {agent: {"played": int(action_dict[agent])} for agent in obs}


def test_group_infos_carry_rllibs_group_keys_with_the_values_rllibs_grouping_gives() -> None:
    rllib_grouped = RPSWithInfos({}).with_agent_groups({"team": ["player1", "player2"]})
    ours = from_rllib(RPSWithInfos({})).with_agent_groups({"team": ["player1", "player2"]})
    rllib_grouped.reset(seed=3)
    ours.reset(seed=3)
    for actions in [(0, 1), (2, 1), (1, 1), (0, 2)]:
        _, rllib_rewards, _, _, rllib_infos = rllib_grouped.step({"team": list(actions)})
        _, rewards, _, _, infos = ours.step({"team": actions})
        assert rewards == rllib_rewards
        assert infos["team"]["_group_rewards"] == rllib_infos["team"]["_group_rewards"]
        assert infos["team"]["_group_info"] == rllib_infos["team"]["_group_info"]
        assert infos["team"]["_group_info"] == [{"played": actions[0]}, {"played": actions[1]}]
