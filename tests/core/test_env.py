"""The MultiAgentEnv contract on the core and the fixture envs."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from marl_core import ALL, MultiAgentEnv, MultiAgentWrapper, make_multi_agent, play, rollout
from marl_core.errors import ConfigError, MultiAgentEnvError, SeedError, SpaceError, UnknownAgentError
from tests.fixtures import seed_envs
from tests.fixtures.envs import (
    HeterogeneousSpacesEnv,
    IrregularOrderEnv,
    JoinLeaveEnv,
    ManyAgentsEnv,
    RockPaperScissors,
    TicTacToe,
)

REPO = Path(__file__).resolve().parents[2]


def acting_sets(env: MultiAgentEnv, seed: int) -> list[list[str]]:
    """Who was asked to act before each step of a seeded random episode."""
    return [sorted(t.actions) for t in play(env, seed=seed) if t.actions is not None]


# The seeds' code, unchanged but for the import line -----------------------------------------


def test_seed_rock_paper_scissors_runs_unchanged() -> None:
    result = rollout(seed_envs.RockPaperScissors(), seed=3)
    assert result.steps == 10
    assert result.lengths == {"player1": 10, "player2": 10}
    assert result.returns["player1"] == -result.returns["player2"]


def test_rollout_returns_name_every_agent_seen_even_unrewarded() -> None:
    result = rollout(TicTacToe(), seed=1, max_steps=1)  # player2 is asked to move, not yet rewarded
    assert result.agents_seen == ["player1", "player2"]
    assert result.returns == {"player1": 0.0, "player2": 0.0} and result.lengths == {"player1": 1, "player2": 0}


def test_seed_tic_tac_toe_runs_unchanged() -> None:
    env = seed_envs.TicTacToe()
    result = rollout(env, seed=3)
    assert result.terminated
    assert 5 <= result.steps <= 60


def test_seed_scaffold_spaces_and_reset() -> None:
    env = seed_envs.MyMultiAgentEnv()
    assert env.possible_agents == ["agent_1", "agent_2"]
    assert env.get_observation_space("agent_2") == gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert env.get_action_space("agent_2") == gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    obs, infos = env.reset()
    assert sorted(obs) == ["agent_1", "agent_2"] and infos == {}


def test_seed_space_override() -> None:
    env = seed_envs.RobotsEnv()
    assert env.get_observation_space("robot_1").shape == (84, 84, 3)
    assert env.get_observation_space("decision_maker") == gym.spaces.Discrete(2)
    with pytest.raises(ValueError, match="bad agent id"):
        env.get_observation_space("pilot")


# Spaces ---------------------------------------------------------------------------------------


def test_unknown_agent_names_the_known_ones() -> None:
    env = RockPaperScissors()
    with pytest.raises(UnknownAgentError) as caught:
        env.get_action_space("player3")
    message = str(caught.value)
    assert "'player3'" in message and "'player1'" in message and "'player2'" in message
    assert isinstance(caught.value, MultiAgentEnvError) and isinstance(caught.value, ValueError)


def test_missing_spaces_say_how_to_fix() -> None:
    class NoSpaces(MultiAgentEnv):
        pass

    with pytest.raises(SpaceError, match="observation_spaces"):
        NoSpaces().get_observation_space("a")


class OldApiStackSpaces(MultiAgentEnv):
    """Spaces as RLlib's old API stack declares them: one ``observation_space`` Dict keyed by
    agent ids, and one ``action_space`` shared by every agent."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["a", "b"]
        self.observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(0, 1, (2,))})
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"a": 0, "b": np.zeros(2, np.float32)}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {"a": self.t % 3, "b": np.ones(2, np.float32)}
        return obs, {"a": float(action_dict["a"]), "b": 0.0}, {ALL: self.t >= 5}, {ALL: False}, {}


def test_spaces_declared_as_on_rllibs_old_api_stack_are_read_as_rllib_reads_them() -> None:
    # Such envs run on RLlib 2.60 and raised "defines no action spaces" here.
    env = OldApiStackSpaces()
    assert env.get_observation_space("a") == gym.spaces.Discrete(3)
    assert env.get_observation_space("b") == gym.spaces.Box(0, 1, (2,))
    assert env.get_action_space("a") == env.get_action_space("b") == gym.spaces.Discrete(2)
    with pytest.raises(UnknownAgentError, match="'c'"):
        env.get_observation_space("c")
    assert rollout(OldApiStackSpaces(), seed=0).lengths == {"a": 5, "b": 5}
    from marl_core.conformance import check_env

    assert check_env(OldApiStackSpaces, seed=0).ok

    class SharedDictObservation(OldApiStackSpaces):  # a Dict observation every agent shares
        def __init__(self, config=None) -> None:
            super().__init__()
            self.observation_space = gym.spaces.Dict({"x": gym.spaces.Discrete(2)})

    assert SharedDictObservation().get_observation_space("b") == gym.spaces.Dict({"x": gym.spaces.Discrete(2)})

    class AgentIdsOnly(MultiAgentEnv):  # agents declared in RLlib's old _agent_ids set alone
        def __init__(self, config=None) -> None:
            super().__init__()
            self._agent_ids = {"a", "b"}
            self.observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Discrete(3)})

    assert AgentIdsOnly().get_observation_space("b") == gym.spaces.Discrete(3)
    with pytest.raises(UnknownAgentError, match="'zz'"):  # it got the whole Dict
        AgentIdsOnly().get_observation_space("zz")

    class AsProperties(MultiAgentEnv):  # spaces as properties: RLlib reads them through getattr
        possible_agents = ["a"]

        @property
        def observation_space(self):
            return gym.spaces.Dict({"a": gym.spaces.Discrete(3)})

        @property
        def action_space(self):
            return gym.spaces.Discrete(2)

    assert AsProperties().get_observation_space("a") == gym.spaces.Discrete(3)
    assert AsProperties().get_action_space("a") == gym.spaces.Discrete(2)

    class Circular(MultiAgentEnv):  # a property built from get_observation_space, and no spaces at all
        possible_agents = ["a"]

        @property
        def observation_space(self):
            return gym.spaces.Dict({a: self.get_observation_space(a) for a in self.possible_agents})

    with pytest.raises(SpaceError, match="defines no observation spaces"):
        Circular().get_observation_space("a")


def test_spaces_set_before_super_init_are_kept() -> None:
    class Early(MultiAgentEnv):
        def __init__(self) -> None:
            self.possible_agents = ["x"]
            self.observation_spaces = {"x": gym.spaces.Discrete(2)}
            super().__init__()

    env = Early()
    assert env.possible_agents == ["x"]
    assert env.get_observation_space("x") == gym.spaces.Discrete(2)
    assert env.action_spaces is None and env.agents == []


def test_reset_seeds_np_random() -> None:
    env = IrregularOrderEnv()
    first, _ = env.reset(seed=11)
    again, _ = env.reset(seed=11)
    other, _ = env.reset(seed=12)
    for agent_id in first:
        np.testing.assert_array_equal(first[agent_id], again[agent_id])
    assert any(not np.array_equal(first[a], other[a]) for a in first)


def test_np_random_is_gymnasiums_generator_for_the_last_seed() -> None:
    from gymnasium.error import Error
    from gymnasium.utils import seeding

    env = MultiAgentEnv()  # its reset() draws nothing
    env.reset(seed=5)
    env.reset(seed=7)  # nothing drew from the first: only the last seed counts
    assert env.np_random_seed == 7
    drawn = env.np_random.integers(1 << 30, size=4)
    assert np.array_equal(drawn, seeding.np_random(7)[0].integers(1 << 30, size=4))
    env.np_random = np.random.default_rng(1)
    assert env.np_random_seed == -1
    for bad in (-1, 1.5, "3", np.int64(-3), True, np.bool_(False)):
        with pytest.raises(SeedError, match=rf"needs a non-negative integer or None, received {re.escape(repr(bad))}") as caught:
            env.reset(seed=bad)
        assert isinstance(caught.value, Error) and isinstance(caught.value, MultiAgentEnvError)
    assert env.np_random_seed == -1  # a refused seed changes nothing
    env.reset(seed=np.int64(7))  # numpy's integers are taken, as PettingZoo's envs take them
    assert env.np_random_seed == 7


# Orders of play -------------------------------------------------------------------------------


def test_simultaneous_every_agent_acts_every_step() -> None:
    assert acting_sets(RockPaperScissors(), seed=0) == [["player1", "player2"]] * 10


def test_turn_based_one_agent_at_a_time_and_reward_to_the_waiting_player() -> None:
    env = TicTacToe()
    transitions = list(play(env, seed=5))
    movers = [next(iter(t.actions)) for t in transitions[1:]]
    assert all(a != b for a, b in itertools.pairwise(movers))
    assert all(len(t.obs) == 1 for t in transitions[:-1])
    # Whoever wins, the loser did not act in the winning step and still gets -5.
    final = transitions[-1]
    mover = next(iter(final.actions))
    others = [a for a in final.rewards if a != mover]
    if final.rewards[mover] == 5.0:
        assert final.rewards[others[0]] == -5.0


def test_start_player_is_seeded() -> None:
    starts = {seed: next(iter(TicTacToe().reset(seed=seed)[0])) for seed in range(20)}
    assert set(starts.values()) == {"player1", "player2"}
    assert all(next(iter(TicTacToe().reset(seed=s)[0])) == p for s, p in starts.items())


def test_irregular_order_matches_the_docs_figure() -> None:
    expected = [sorted(IrregularOrderEnv.ORDER[i % 3]) for i in range(9)]
    assert acting_sets(IrregularOrderEnv(), seed=0) == expected


def test_rewards_for_agents_not_acting_are_counted() -> None:
    result = rollout(IrregularOrderEnv(), lambda agent_id, obs: 1, seed=0)
    # Each agent acts in 6 of 9 steps (reward 1 each) and is a bystander in 3 (0.5 each).
    assert result.returns == {"agent_1": 7.5, "agent_2": 7.5, "agent_3": 7.5}
    assert result.lengths == {"agent_1": 6, "agent_3": 6, "agent_2": 6}


def test_agents_join_late_and_leave_early() -> None:
    env = JoinLeaveEnv()
    transitions = list(play(env, lambda agent_id, obs: 1, seed=0))
    keys = [sorted(t.obs) for t in transitions]
    assert keys[0] == ["scout"]
    assert keys[2] == ["runner", "scout"] and keys[3] == ["keeper", "runner", "scout"]
    assert keys[4] == ["keeper", "runner", "scout"] and transitions[4].terminateds["scout"]
    assert keys[5] == ["keeper", "runner"]
    assert transitions[6].truncateds["runner"] and keys[7] == ["keeper"]
    ended: set[str] = set()
    for t in transitions:
        assert not (set(t.obs) | set(t.rewards)) & ended, "an ended agent appeared again"
        ended |= {a for a in t.obs if t.terminateds.get(a) or t.truncateds.get(a)}
    result = rollout(JoinLeaveEnv(), lambda agent_id, obs: 1, seed=0)
    assert result.lengths == {"scout": 4, "runner": 4, "keeper": 5}
    assert result.returns["keeper"] == pytest.approx(0.3)  # 0.1 each time runner acted with keeper in
    assert transitions[-1].terminateds[ALL]


def test_heterogeneous_spaces_and_masks_are_respected() -> None:
    env = HeterogeneousSpacesEnv()
    for seed in range(15):
        for t in play(env, seed=seed):
            for agent_id, observation in t.obs.items():
                assert env.get_observation_space(agent_id).contains(observation), agent_id
            for agent_id, action in (t.actions or {}).items():
                assert env.get_action_space(agent_id).contains(action), agent_id


def test_many_agents_with_space_overrides() -> None:
    env = ManyAgentsEnv({"num_agents": 120})
    assert env.observation_spaces is None and env.max_num_agents == 120
    result = rollout(env, seed=0)
    assert len(result.lengths) == 120 and set(result.lengths.values()) == {5}
    obs, _ = env.reset(seed=1)
    assert all(env.get_observation_space(a).contains(o) for a, o in obs.items())


# The runner -----------------------------------------------------------------------------------


def test_rollout_takes_a_policy_per_agent() -> None:
    policies = {"player1": lambda obs: 0, "player2": lambda obs: 1}  # rock vs paper
    result = rollout(RockPaperScissors(), policies, seed=0)
    assert result.returns == {"player1": -10.0, "player2": 10.0}


def test_rollout_names_a_missing_policy() -> None:
    with pytest.raises(UnknownAgentError, match="player2"):
        rollout(RockPaperScissors(), {"player1": lambda obs: 0}, seed=0)


def test_a_key_error_inside_a_policy_is_the_policys_own() -> None:
    def reads_a_missing_key(observation: object) -> int:
        return {"mask": 0}["action_mask"]

    with pytest.raises(KeyError, match="action_mask") as caught:
        rollout(RockPaperScissors(), {"player1": reads_a_missing_key, "player2": lambda obs: 1}, seed=0)
    assert not isinstance(caught.value, UnknownAgentError)


def test_a_policy_that_is_not_callable_is_refused_before_the_episode() -> None:
    with pytest.raises(TypeError, match=r"a policy per agent must be a callable .*\{'player1': None\}"):
        rollout(RockPaperScissors(), {"player1": None, "player2": lambda obs: 1}, seed=0)
    with pytest.raises(TypeError, match=r"a policy is a callable \(agent_id, observation\) -> action, or a dict of "
                                        r"callables .*; received 42"):
        rollout(RockPaperScissors(), 42, seed=0)  # it was "'int' object is not callable" from inside the loop


def test_rollout_and_random_policy_refuse_a_bad_seed_by_name() -> None:
    # numpy's "expected non-negative integer" and "seed must be integer" came through.
    from marl_core.rollout import RandomPolicy

    for bad in (-1, 1.5, True):
        with pytest.raises(SeedError, match=f"reset\\(seed=...\\) needs a non-negative integer or None, received {bad!r}"):
            rollout(RockPaperScissors(), seed=bad)  # type: ignore[arg-type]
        with pytest.raises(SeedError):
            RandomPolicy(RockPaperScissors(), seed=bad)  # type: ignore[arg-type]
        with pytest.raises(SeedError):
            next(play(RockPaperScissors(), lambda agent_id, obs: 0, seed=bad))  # type: ignore[arg-type]
    assert rollout(RockPaperScissors(), seed=np.int64(2)).returns == rollout(RockPaperScissors(), seed=2).returns


def test_rollout_stops_at_max_steps() -> None:
    result = rollout(RockPaperScissors(), seed=0, max_steps=4)
    assert result.steps == 4 and result.truncated and not result.terminated


def test_rollout_reports_an_env_that_asks_nobody_to_act() -> None:
    class Stuck(RockPaperScissors):
        def step(self, action_dict):
            _, rewards, _, _, infos = super().step(action_dict)
            return {}, rewards, {ALL: False}, {}, infos

    with pytest.raises(MultiAgentEnvError, match="asked no agent to act"):
        rollout(Stuck(), seed=0)


def test_random_policy_is_seeded_and_does_not_touch_the_global_rng() -> None:
    state = np.random.get_state()
    first = [t.actions for t in play(HeterogeneousSpacesEnv(), seed=4)]
    second = [t.actions for t in play(HeterogeneousSpacesEnv(), seed=4)]
    assert np.random.get_state()[1].tolist() == state[1].tolist()
    assert repr(first) == repr(second)


class GuessTheNumber(MultiAgentEnv):
    """One guess at a number from 0 to 2 that reset draws from the env's own ``np_random``."""

    def __init__(self, config=None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["p"]
        self.observation_spaces = {"p": gym.spaces.Discrete(1)}
        self.action_spaces = {"p": gym.spaces.Discrete(3)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.secret = int(self.np_random.integers(3))
        return {"p": 0}, {}

    def step(self, action_dict):
        return {}, {"p": float(action_dict["p"] == self.secret)}, {ALL: True}, {ALL: False}, {}


def test_a_seeded_random_policy_does_not_draw_the_envs_numbers() -> None:
    # Seeded alike, the policy's generator was the env's: the "random" guess was right every time.
    hits = sum(rollout(GuessTheNumber(), seed=seed).returns["p"] for seed in range(300))
    assert 60 < hits < 140  # a third of 300, give or take five standard deviations


# make_multi_agent -----------------------------------------------------------------------------


def test_copies_of_vectorized_make_multi_agent_envs_never_share_a_seed() -> None:
    # Copy i was seeded s + i, and env j of a vector s + j: env 0's agent_1 and env 1's agent_0
    # started every episode alike.
    from marl_core.vector import VectorMultiAgentEnv

    MultiCartPole = make_multi_agent("CartPole-v1")
    with VectorMultiAgentEnv([lambda: MultiCartPole({"num_agents": 3})] * 3) as vector:
        obs_list, _ = vector.reset(seed=0)
    starts = [tuple(obs[a].tolist()) for obs in obs_list for a in sorted(obs)]
    assert len(set(starts)) == 9


def test_make_multi_agent_from_a_registered_name() -> None:
    MultiCartPole = make_multi_agent("CartPole-v1")
    env = MultiCartPole({"num_agents": 3})
    obs, _ = env.reset(seed=7)
    again, _ = MultiCartPole({"num_agents": 3}).reset(seed=7)
    assert sorted(obs) == ["agent_0", "agent_1", "agent_2"]
    for agent_id in obs:
        np.testing.assert_array_equal(obs[agent_id], again[agent_id])
    assert not np.array_equal(obs["agent_0"], obs["agent_1"])  # each copy has a seed of its own
    np.testing.assert_array_equal(obs["agent_0"], gym.make("CartPole-v1").reset(seed=7)[0])  # copy 0: the seed
    transitions = list(play(env, seed=7))
    ended_at = {}
    for t in transitions[1:]:
        for agent_id in t.obs:
            if t.terminateds.get(agent_id) or t.truncateds.get(agent_id):
                ended_at[agent_id] = t.index
    assert sorted(ended_at) == ["agent_0", "agent_1", "agent_2"]
    assert transitions[-1].index == max(ended_at.values()) and transitions[-1].terminateds[ALL]


def test_make_multi_agent_from_a_creator_gets_the_config() -> None:
    seen = []

    def creator(config):
        seen.append(dict(config))
        return gym.make("Pendulum-v1")

    env = make_multi_agent(creator)({"num_agents": 2, "flavour": "x"})
    assert seen == [{"num_agents": 2, "flavour": "x"}] * 2
    assert isinstance(env.get_action_space("agent_1"), gym.spaces.Box)
    result = rollout(env, seed=0)
    assert result.truncated and result.steps == 200  # Pendulum truncates at 200 steps


def test_make_multi_agent_takes_a_creator_without_arguments_and_only_whole_agent_counts() -> None:
    # A creator taking no config was a raw TypeError; num_agents went through int(): 2.7 made 2 agents,
    # "3" made 3 and True made 1.
    env = make_multi_agent(lambda: gym.make("CartPole-v1"))({"num_agents": 2})
    assert env.possible_agents == ["agent_0", "agent_1"]
    # Other keys, which it cannot receive, were dropped silently.
    with pytest.raises(ConfigError, match=r"config keys \['flavour'\] are set, but the creator <function .*<lambda>"
                                          r".*> takes no argument to receive them"):
        make_multi_agent(lambda: gym.make("CartPole-v1"))({"num_agents": 2, "flavour": "x"})
    assert make_multi_agent("CartPole-v1")({"num_agents": np.int64(3)}).possible_agents[-1] == "agent_2"
    for bad in (2.7, "3", True, None, 0):
        with pytest.raises(ConfigError, match=re.escape(f"num_agents must be an integer of 1 or more, received {bad!r}")):
            make_multi_agent("CartPole-v1")({"num_agents": bad})


def test_make_multi_agent_rejects_an_action_for_an_ended_agent() -> None:
    env = make_multi_agent("CartPole-v1")({"num_agents": 2})
    env.reset(seed=0)
    with pytest.raises(MultiAgentEnvError, match="agent_5"):
        env.step({"agent_0": 0, "agent_1": 0, "agent_5": 1})


# Wrappers and imports -------------------------------------------------------------------------


def test_wrapper_forwards_and_shows_the_stack() -> None:
    class Scale(MultiAgentWrapper):
        def step(self, action_dict):
            obs, rewards, terms, truncs, infos = self.env.step(action_dict)
            return obs, {a: 2 * r for a, r in rewards.items()}, terms, truncs, infos

    inner = IrregularOrderEnv()
    env = Scale(inner)
    assert str(env) == "<Scale<IrregularOrderEnv>>"
    assert env.possible_agents == inner.possible_agents
    assert env.get_action_space("agent_2") == gym.spaces.Discrete(2)
    assert env.unwrapped is inner
    result = rollout(env, lambda agent_id, obs: 1, seed=0)
    assert result.returns["agent_1"] == 15.0


def test_a_wrapper_can_set_its_own_metadata_and_render_mode() -> None:
    # Both were read-only properties: assigning them (as gymnasium.Wrapper allows) was an AttributeError.
    class Renders(MultiAgentWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.metadata = {"render_modes": ["ansi"]}
            self.render_mode = "ansi"

    inner = IrregularOrderEnv()
    plain, renders = MultiAgentWrapper(inner), Renders(inner)
    assert plain.metadata == inner.metadata and plain.render_mode == inner.render_mode
    assert renders.metadata == {"render_modes": ["ansi"]} and renders.render_mode == "ansi"
    assert inner.render_mode is None


def test_importing_the_packages_loads_neither_torch_nor_ray() -> None:
    code = "import sys, marl_core, bridges; print(sorted(m for m in ('torch', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("script", ["rock_paper_scissors.py", "tic_tac_toe.py"])
def test_examples_run_as_scripts(script: str) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / script)], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert "random play: returns" in out.stdout


def test_the_shipped_rock_paper_scissors_refuses_bad_action_dicts_and_stays_as_it_was() -> None:
    # The docs' code counted the move, then raised a bare KeyError (or dropped an extra agent's
    # action, or played on past its end).
    from marl_core.envs import RockPaperScissors
    from marl_core.errors import (
        InvalidActionError,
        MissingActionError,
        ResetNeededError,
        UnexpectedActionError,
    )

    env = RockPaperScissors()
    env.reset(seed=0)
    bad = [({"player1": 0}, MissingActionError), ({"player1": 7, "player2": 0}, InvalidActionError),
           ({"player1": 0, "player2": 1, "ghost": 2}, UnexpectedActionError)]
    for actions, error in bad:
        with pytest.raises(error):
            env.step(actions)
    assert env.num_moves == 0
    for _ in range(10):
        env.step({"player1": 0, "player2": 1})
    with pytest.raises(ResetNeededError, match="the episode ended after 10 moves"):
        env.step({"player1": 0, "player2": 1})
    assert env.num_moves == 10


def test_merge_common_infos_loses_nothing() -> None:
    from marl_core.env import merge_common_infos

    assert merge_common_infos({"x": 1}, {}) == {"x": 1}
    assert merge_common_infos(None, {"b": {}}) == {"b": {}}
    assert merge_common_infos({}, {"b": {"t": 1}}) == {"b": {"t": 1}}
    assert merge_common_infos({"x": 1}, {"b": {"t": 1}}) == {"x": 1, "b": {"t": 1}}
    assert merge_common_infos("hello", {"b": {"t": 1}}) == {"__common__": "hello", "b": {"t": 1}}
    assert merge_common_infos(7, {}) == 7
