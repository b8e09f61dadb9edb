"""MultiAgentEnv -> PettingZoo: ``to_aec`` and ``to_parallel`` on the contract fixture envs."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test
from pettingzoo.utils.conversions import parallel_to_aec
from supersuit import frame_stack_v1  # a name: supersuit's module __getattr__ fails pytest's probes

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv, to_aec, to_parallel
from bridges.pettingzoo_export import MultiAgentAECEnv, MultiAgentParallelEnv
from marl_core.conformance import check_env
from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import (
    EnvContractError,
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    UnexpectedActionError,
    UnsupportedEnvError,
)
from marl_core.rollout import play, rollout
from marl_core.spaces import is_masked, sample_action_for
from tests.fixtures.envs import CORRECT_ENVS, IrregularOrderEnv, JoinLeaveEnv, RockPaperScissors, TicTacToe

api_warnings = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test")
SIMULTANEOUS = ["simultaneous", "join_leave", "heterogeneous", "many_agents"]


def _spaces(name):
    env = CORRECT_ENVS[name]()
    return [env.get_observation_space(a) for a in env.possible_agents]


def _all_agents_at_reset(name):
    env = CORRECT_ENVS[name]()
    env.reset(seed=0)
    return set(env.agents) == set(env.possible_agents)


# PettingZoo's api_test reads ``observation.dtype``, so it needs numpy observations: fixtures that
# observe Python ints (Discrete observations) are covered by the round trips and the checker.
NUMPY_OBSERVATIONS = [n for n in sorted(CORRECT_ENVS) if all(isinstance(s, Box) for s in _spaces(n))]
# seed_test seeds the action spaces of the agents present at reset, and parallel_seed_test samples
# actions without masks: late joiners and masked envs are beyond them.
AEC_SEEDABLE = [n for n in NUMPY_OBSERVATIONS if _all_agents_at_reset(n)]
PARALLEL_SEEDABLE = [n for n in SIMULTANEOUS if _all_agents_at_reset(n) and not any(map(is_masked, _spaces(n)))]


def _observations_by_agent(env, seed):
    seen: dict[str, list] = {}
    for transition in play(env, seed=seed):
        for agent_id, observation in transition.obs.items():
            seen.setdefault(agent_id, []).append(observation)
    return seen


@pytest.mark.parametrize("name", sorted(CORRECT_ENVS))
def test_round_trip_through_aec_keeps_turns_observations_and_returns(name):
    make = CORRECT_ENVS[name]
    for seed in (0, 1):
        direct = rollout(make(), seed=seed)
        through = rollout(PettingZooEnv(to_aec(make())), seed=seed)
        assert through.returns == pytest.approx(direct.returns)
        assert through.lengths == direct.lengths
        ours, theirs = _observations_by_agent(PettingZooEnv(to_aec(make())), seed), _observations_by_agent(make(), seed)
        assert list(ours) == list(theirs)
        for agent_id, observations in theirs.items():
            # An AEC env gives every agent a last turn: an agent that the env did not observe at
            # the end sees its latest observation once more.
            extra = ours[agent_id][len(observations) :]
            assert data_equivalence(ours[agent_id][: len(observations)], observations)
            assert len(extra) <= 1 and data_equivalence(extra, observations[-1:] if extra else [])


@pytest.mark.parametrize("name", SIMULTANEOUS)
def test_round_trip_through_parallel_keeps_everything(name):
    make = CORRECT_ENVS[name]
    for seed in (0, 1):
        direct, through = list(play(make(), seed=seed)), list(play(ParallelPettingZooEnv(to_parallel(make())), seed=seed))
        assert len(through) == len(direct)
        assert rollout(ParallelPettingZooEnv(to_parallel(make())), seed=seed).returns == pytest.approx(
            rollout(make(), seed=seed).returns
        )
        for ours, theirs in zip(through, direct, strict=True):
            assert data_equivalence(ours.actions, theirs.actions)
            assert list(ours.obs) == list(theirs.obs)
            assert data_equivalence(ours.obs, theirs.obs)


@api_warnings
@pytest.mark.parametrize("name", NUMPY_OBSERVATIONS)
def test_pettingzoo_api_test_passes_on_to_aec(name):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(to_aec(CORRECT_ENVS[name]()), num_cycles=50)
    assert "Passed API test" in printed.getvalue()


@pytest.mark.parametrize("name", AEC_SEEDABLE)
def test_pettingzoo_seed_test_passes_on_to_aec(name):
    seed_test(lambda: to_aec(CORRECT_ENVS[name]()), num_cycles=20)


@api_warnings
@pytest.mark.parametrize("name", SIMULTANEOUS)
def test_pettingzoo_parallel_api_test_passes_on_to_parallel(name):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        parallel_api_test(to_parallel(CORRECT_ENVS[name]()), num_cycles=50)
    assert "Passed Parallel API test" in printed.getvalue()


@pytest.mark.parametrize("name", PARALLEL_SEEDABLE)
def test_pettingzoo_parallel_seed_test_passes_on_to_parallel(name):
    parallel_seed_test(lambda: to_parallel(CORRECT_ENVS[name]()), num_cycles=20)


def test_the_fixture_lists_for_pettingzoo_tests_are_not_empty():
    assert NUMPY_OBSERVATIONS == ["irregular_order", "join_leave", "turn_based"]
    assert AEC_SEEDABLE == ["irregular_order", "turn_based"]
    assert PARALLEL_SEEDABLE == ["simultaneous", "many_agents"]


@pytest.mark.parametrize("name", sorted(CORRECT_ENVS))
def test_checker_finds_no_error_after_a_round_trip(name):
    make = CORRECT_ENVS[name]
    assert check_env(lambda: PettingZooEnv(to_aec(make())), episodes=2).ok
    if name in SIMULTANEOUS:
        report = check_env(lambda: ParallelPettingZooEnv(to_parallel(make())), episodes=2)
        assert report.ok, report.errors


def test_to_aec_keeps_a_parallel_envs_is_parallelizable_so_pettingzoo_converts_it_back():
    from pettingzoo.butterfly import pistonball_v6
    from pettingzoo.utils.conversions import aec_to_parallel

    aec = to_aec(ParallelPettingZooEnv(pistonball_v6.parallel_env(n_pistons=3)))
    assert aec.metadata["is_parallelizable"] is True  # it was always False
    with contextlib.redirect_stdout(io.StringIO()):
        parallel_api_test(aec_to_parallel(aec), num_cycles=20)
    assert to_aec(TicTacToe()).metadata["is_parallelizable"] is False


def test_to_parallel_names_the_agents_not_asked_to_act():
    env = to_parallel(TicTacToe())
    with pytest.raises(UnsupportedEnvError, match=r"\['player2'\] were not asked to act \(acting now: \['player1'\]\).*to_aec"):
        env.reset(seed=1)  # seed 1: player1 starts
    irregular = to_parallel(IrregularOrderEnv())
    with pytest.raises(UnsupportedEnvError, match=r"\['agent_2'\] were not asked"):
        irregular.reset(seed=0)
    assert irregular.agents == []


def test_to_parallel_gives_back_the_wrapped_parallel_env_and_wraps_anything_else():
    from mpe2 import simple_spread_v3

    raw = simple_spread_v3.parallel_env()
    assert to_parallel(ParallelPettingZooEnv(raw)) is raw
    assert isinstance(to_parallel(RockPaperScissors()), MultiAgentParallelEnv)
    assert isinstance(to_aec(ParallelPettingZooEnv(raw)), MultiAgentAECEnv)


def test_to_aec_buffers_simultaneous_actions_and_checks_them_first():
    env = to_aec(RockPaperScissors())
    with pytest.raises(ResetNeededError):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(InvalidActionError, match="player1"):
        env.step(3)
    assert env.agent_selection == "player1"
    env.step(0)
    assert env.agent_selection == "player2" and env.rewards == {"player1": 0, "player2": 0}
    env.step(2)  # scissors lose to rock
    assert env.rewards == {"player1": 1, "player2": -1}
    assert env.last()[1] == 1 and env.agent_selection == "player1"


class TwoSliders(MultiAgentEnv):
    """``a`` and ``b`` move at once, a Box(-1, 1) action each, for 2 steps; ``received`` keeps
    (copies of) the actions the env got."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: Box(-1.0, 1.0, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = dict(self.observation_spaces)
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict):
        self.received.append({x: np.array(v) for x, v in action_dict.items()})
        self.t += 1
        done = self.t >= 2
        self.agents = [] if done else ["a", "b"]
        obs = {x: np.asarray(action_dict[x], np.float32) for x in action_dict}
        return obs, dict.fromkeys(action_dict, 0.0), {ALL: done}, {ALL: False}, {}


def test_to_aec_buffers_the_action_it_checked_not_the_callers_array():
    # The env got what the caller's array held later: another value, or one outside the space.
    env = to_aec(TwoSliders())
    env.reset(seed=0)
    action = np.array([0.5], np.float32)
    env.step(action)
    action[0] = 7.0  # the caller reuses its array
    env.step(np.array([0.1], np.float32))
    assert [{x: float(v[0]) for x, v in got.items()} for got in env.unwrapped.env.received] == [
        {"a": 0.5, "b": pytest.approx(0.1)}]


def _legal(env, agent_id):
    return np.flatnonzero(env.observe(agent_id)["action_mask"])


def test_to_aec_refuses_a_masked_action_before_buffering_it():
    from bridges.openspiel import OpenSpielEnv

    env = to_aec(OpenSpielEnv("goofspiel(num_cards=4)"))
    env.reset(seed=0)
    for _ in range(2):  # one round: both players play their lowest card
        env.step(int(_legal(env, env.agent_selection)[0]))
    first, used = env.agent_selection, int(np.flatnonzero(env.observe(env.agent_selection)["action_mask"] == 0)[0])
    with pytest.raises(IllegalActionError, match=f"'{first}'"):
        env.step(used)  # a card already played: refused at once, not when the round completes
    assert env.agent_selection == first
    env.step(int(_legal(env, first)[0]))
    second = env.agent_selection
    env.step(int(_legal(env, second)[0]))  # the round completes with two legal cards
    assert env.agent_selection == first and len(_legal(env, first)) == 2

    permissive = to_aec(OpenSpielEnv("goofspiel(num_cards=4)"), check_legal=False)
    permissive.reset(seed=0)
    for _ in range(2):
        permissive.step(0)
    permissive.step(0)  # buffered unchecked: the MultiAgentEnv judges it when the round completes
    with pytest.raises(IllegalActionError, match="'player_0'"):
        permissive.step(1)


def test_to_aec_common_infos_belong_to_the_current_episode():
    class CommonOnFirstEpisode(RockPaperScissors):
        episodes = 0

        def reset(self, *, seed=None, options=None):
            obs, infos = super().reset(seed=seed, options=options)
            CommonOnFirstEpisode.episodes += 1
            return obs, ({"__common__": {"episode": 1}} if self.episodes == 1 else infos)

    env = to_aec(CommonOnFirstEpisode())
    env.reset(seed=0)
    assert env.common_infos == {"episode": 1}
    env.step(0)  # buffered: the MultiAgentEnv has not stepped
    assert env.common_infos == {"episode": 1}
    env.step(1)  # the MultiAgentEnv's step gave no common infos
    assert env.common_infos == {}
    env.reset(seed=1)
    assert env.common_infos == {}


class PaysBeforeJoining(MultiAgentEnv):
    """``a`` acts three times; ``b`` is paid 5.0 at step 1, joins at step 2 and ends with ``a``."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: Box(0, 9, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(2) for x in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a"]
        return {"a": np.zeros(1, np.float32)}, {}

    def step(self, action_dict):
        self.t += 1
        rewards = dict.fromkeys(action_dict, 1.0)
        if self.t == 1:
            rewards["b"] = 5.0
        if self.t == 2:
            self.agents = ["a", "b"]
        done = self.t >= 3
        obs = {x: np.full(1, self.t, np.float32) for x in self.agents}
        if done:
            self.agents = []
        return obs, rewards, {ALL: done, **dict.fromkeys(obs, done)}, {ALL: False}, {}


def test_a_reward_paid_before_an_agent_joins_reaches_it_when_it_joins():
    # It went into _cumulative_rewards only, so PettingZooEnv (which reads env.rewards) lost it.
    assert rollout(PaysBeforeJoining(), seed=0).returns == {"a": 3.0, "b": 6.0}
    assert rollout(PettingZooEnv(to_aec(PaysBeforeJoining())), seed=0).returns == {"a": 3.0, "b": 6.0}
    assert _aec_returns(to_aec(PaysBeforeJoining())) == {"a": 3.0, "b": 6.0}


def _aec_returns(env) -> dict[str, float]:
    """Each agent's summed rewards, played with PettingZoo's own loop (action 0 for everyone)."""
    env.reset(seed=0)
    seen: dict[str, float] = {}
    for agent_id in env.agent_iter():
        _, reward, terminated, truncated, _ = env.last()
        seen[agent_id] = seen.get(agent_id, 0.0) + reward
        env.step(None if terminated or truncated else 0)
    return seen


class TruncatedUnseenThenPaid(PaysBeforeJoining):
    """``b``, never observed, is truncated at step 1 (nothing paid), paid 1.0 at step 2; the
    episode ends at step 3 on ``terminateds["__all__"]``."""

    def step(self, action_dict):
        self.t += 1
        obs = {"a": np.full(1, self.t, np.float32)}
        if self.t == 3:
            self.agents = []
        return (obs, {"b": 1.0} if self.t == 2 else {}, {ALL: self.t == 3}, {ALL: False, "b": self.t == 1}, {})


def test_an_agent_truncated_before_it_was_observed_ends_truncated_when_paid_later():
    # It was reported terminated (the episode's flag) with the reward at the episode's end.
    env = to_aec(TruncatedUnseenThenPaid())
    env.reset(seed=0)
    ends = {}
    for agent_id in env.agent_iter():
        _, reward, terminated, truncated, _ = env.last()
        if terminated or truncated:
            ends[agent_id] = (reward, terminated, truncated)
        env.step(None if terminated or truncated else 0)
    assert ends["b"] == (1.0, False, True) and ends["a"][1:] == (True, False)


class PaidButNeverJoins(PaysBeforeJoining):
    """``b`` is paid 5.0 at step 1 but never observed; the episode ends at step 3, on ``"__all__"``
    only or, with ``ends_b``, with ``b`` terminated (still unobserved) at step 2."""

    def __init__(self, config=None, ends_b=False):
        super().__init__(config)
        self.ends_b = ends_b

    def step(self, action_dict):
        self.t += 1
        rewards = {"a": 1.0, **({"b": 5.0} if self.t == 1 else {})}
        done = self.t >= 3
        obs = {"a": np.full(1, self.t, np.float32)}
        return obs, rewards, {ALL: done, **({"b": True} if self.ends_b and self.t == 2 else {})}, {ALL: False}, {}


@pytest.mark.parametrize("ends_b", [False, True], ids=["episode-ends", "b-ends-unobserved"])
def test_a_reward_for_an_agent_never_observed_reaches_it_in_a_dead_step(ends_b):
    # The 5.0 waited for b to join, which it never did: it was lost (a log line said so).
    assert rollout(PaidButNeverJoins(ends_b=ends_b), seed=0).returns == {"a": 3.0, "b": 5.0}
    assert _aec_returns(to_aec(PaidButNeverJoins(ends_b=ends_b))) == {"a": 3.0, "b": 5.0}
    env = to_aec(PaidButNeverJoins(ends_b=ends_b))
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    if ends_b:  # b's dead step comes at once, with its reward
        assert env.agent_selection == "b" and env.terminations["b"] is True
        assert env.last()[1] == 5.0
        # It observed None, outside its space: PettingZoo's api_test and SuperSuit's wrappers failed on it.
        assert not env.observed("b") and env.observed("a")
        np.testing.assert_array_equal(env.observe("b"), np.zeros(1, np.float32))
        assert env.observation_space("b").contains(env.observe("b"))


@api_warnings
@pytest.mark.parametrize("ends_b", [False, True], ids=["episode-ends", "b-ends-unobserved"])
def test_pettingzoo_tools_take_an_agent_that_joins_only_for_its_reward(ends_b):
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(to_aec(PaidButNeverJoins(ends_b=ends_b)), num_cycles=10)
    assert "Passed API test" in printed.getvalue()
    stacked = frame_stack_v1(to_aec(PaidButNeverJoins(ends_b=ends_b)), 2)
    assert _aec_returns(stacked) == {"a": 3.0, "b": 5.0}


def test_an_agent_never_observed_has_no_final_observation_through_the_round_trip():
    # PettingZooEnv(to_aec(env)) handed b a final observation of None, outside its space.
    bridged = PettingZooEnv(to_aec(PaidButNeverJoins(ends_b=True)))
    assert rollout(bridged, seed=0).returns == {"a": 3.0, "b": 5.0}
    bridged.reset(seed=0)
    bridged.step({"a": 0})
    obs, rewards, terminateds, _, infos = bridged.step({"a": 0})
    assert "b" not in obs and "b" not in infos and terminateds["b"] is True and rewards["b"] == 5.0
    report = check_env(lambda: PettingZooEnv(to_aec(PaidButNeverJoins(ends_b=True))))
    assert report.ok, report


class FlagsEveryPossibleAgent(PaysBeforeJoining):
    """Four possible agents, of which only ``a`` plays; the last step flags all four (an RLlib idiom)."""

    def __init__(self, config=None):
        super().__init__(config)
        self.possible_agents = ["a", "b", "c", "d"]
        self.observation_spaces = {x: Box(0, 9, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: Discrete(2) for x in self.possible_agents}

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 3
        flags = dict.fromkeys(self.possible_agents, True) if done else {}
        return {"a": np.full(1, self.t, np.float32)}, {"a": 1.0}, {ALL: done, **flags}, {ALL: False}, {}


class FlagsAndZeroPaysEveryPossibleAgent(FlagsEveryPossibleAgent):
    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, {**dict.fromkeys(self.possible_agents, 0.0), **rewards}, terminateds, truncateds, infos


@api_warnings
@pytest.mark.parametrize("source", [FlagsEveryPossibleAgent, FlagsAndZeroPaysEveryPossibleAgent])
def test_agents_that_never_took_part_get_no_dead_step(source):
    # They got dead steps observing None (a zero reward counted as one to carry).
    assert _aec_returns(to_aec(source())) == {"a": 3.0}
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(to_aec(source()), num_cycles=10)
    assert "Passed API test" in printed.getvalue()
    assert check_env(lambda: PettingZooEnv(to_aec(source()))).ok


class InfoAtResetOnly(RockPaperScissors):
    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"player1": {"event": "spawned"}}


def test_an_info_belongs_to_the_call_that_gave_it():
    # player1's reset info was in last() at every later turn, and PettingZooEnv(to_aec(env)) handed
    # it back as if each step had given it.
    env = to_aec(InfoAtResetOnly())
    env.reset(seed=0)
    assert env.last()[4] == {"event": "spawned"}
    env.step(0)
    env.step(1)
    assert env.agent_selection == "player1" and env.last()[4] == {}
    bridged = PettingZooEnv(to_aec(InfoAtResetOnly()))
    assert bridged.reset(seed=0)[1] == {"player1": {"event": "spawned"}}
    bridged.step({"player1": 0})
    assert bridged.step({"player2": 0})[4] == {"player1": {}}


class EndsOneAndAsksNobody(RockPaperScissors):
    """player1 ends at step 1 (final observation) while player2, alive, is not asked to act."""

    def step(self, action_dict):
        obs, rewards, _, _, infos = super().step(action_dict)
        self.agents = ["player2"]
        return {"player1": obs["player1"]}, rewards, {"player1": True, ALL: False}, {ALL: False}, infos


class BringsBackAnEndedAgent(PaysBeforeJoining):
    """``a`` and ``b`` act; ``b`` ends at step 1 and is asked to act again at step 2."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents = ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {x: np.full(1, self.t, np.float32) for x in ("a", "b")}
        if self.t == 1:
            self.agents = ["a"]
        return obs, {}, {ALL: False, **({"b": True} if self.t == 1 else {})}, {ALL: False}, {}


def test_a_step_that_asks_nobody_to_act_or_brings_an_agent_back_is_named():
    # The first left agent_selection on the removed agent: KeyError('player1') in PettingZoo's last().
    env = to_aec(EndsOneAndAsksNobody())
    env.reset(seed=0)
    env.step(0)
    with pytest.raises(EnvContractError, match=r"asked no agent to act after a step without ending the episode "
                                               r"\(agents: \['player1', 'player2'\]; ending now: \['player1'\]\)"):
        env.step(0)
    # The second was a bare KeyError.
    env = to_aec(BringsBackAnEndedAgent())
    env.reset(seed=0)
    env.step(0)
    env.step(0)
    assert env.agent_selection == "b" and env.terminations["b"]
    env.step(None)  # b's dead step
    with pytest.raises(EnvContractError, match=r"observed \['b'\] again after they ended"):
        env.step(0)


def _counts_in_common(name):
    """The fixture env ``name`` giving ``{"__common__": {"calls": n}}`` at its n-th reset or step."""

    class CountsInCommon(CORRECT_ENVS[name]):
        def reset(self, *, seed=None, options=None):
            obs, infos = super().reset(seed=seed, options=options)
            self.calls = 0
            return obs, {**infos, "__common__": {"calls": 0}}

        def step(self, action_dict):
            *result, infos = super().step(action_dict)
            self.calls += 1
            return (*result, {**infos, "__common__": {"calls": self.calls}})

    return CountsInCommon


@pytest.mark.parametrize("name", ["turn_based", "simultaneous"])
def test_common_infos_come_back_through_pettingzoo_env_once_per_step_of_the_env(name):
    counts_in_common = _counts_in_common(name)
    direct = [t.infos.get("__common__") for t in play(counts_in_common(), seed=0)]
    through = [t.infos.get("__common__") for t in play(PettingZooEnv(to_aec(counts_in_common())), seed=0)]
    assert [c for c in through if c is not None] == direct
    assert direct == [{"calls": n} for n in range(len(direct))]


@pytest.mark.parametrize("name", SIMULTANEOUS)
def test_to_parallel_keeps_common_infos_aside_and_parallel_pettingzoo_env_gives_them_back(name):
    # They were in infos under "__common__", which PettingZoo's parallel_to_aec took for an agent.
    counts_in_common = _counts_in_common(name)
    env = to_parallel(counts_in_common())
    obs, infos = env.reset(seed=0)
    assert "__common__" not in infos and env.common_infos == {"calls": 0}
    rng = np.random.default_rng(0)
    _, _, _, _, infos = env.step({a: sample_action_for(env.action_space(a), obs[a], rng) for a in env.agents})
    assert "__common__" not in infos and env.common_infos == {"calls": 1}
    direct = [t.infos.get("__common__") for t in play(counts_in_common(), seed=0)]
    through = [t.infos.get("__common__") for t in play(ParallelPettingZooEnv(to_parallel(counts_in_common())), seed=0)]
    assert through == direct == [{"calls": n} for n in range(len(direct))]


@api_warnings
def test_pettingzoo_converts_a_to_parallel_export_with_common_infos_and_passes_its_api_test():
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(parallel_to_aec(to_parallel(_counts_in_common("join_leave")())), num_cycles=50)
        parallel_api_test(to_parallel(_counts_in_common("join_leave")()), num_cycles=50)
    assert "Passed API test" in printed.getvalue() and "Passed Parallel API test" in printed.getvalue()


def _parallel_returns(env, strict: bool = True) -> dict[str, float]:
    """Each agent's summed rewards, played with PettingZoo's parallel loop (action 0 for everyone);
    ``strict`` checks that every step's dicts are keyed by the agents of the step."""
    env.reset(seed=0)
    seen: dict[str, float] = {}
    while env.agents:
        obs, rewards, terminations, truncations, infos = env.step(dict.fromkeys(env.agents, 0))
        assert obs.keys() == terminations.keys() == truncations.keys() == infos.keys()
        assert rewards.keys() == obs.keys() or not strict
        for agent_id, reward in rewards.items():
            seen[agent_id] = seen.get(agent_id, 0.0) + reward
    return seen


@api_warnings
@pytest.mark.parametrize("make", [PaysBeforeJoining, FlagsAndZeroPaysEveryPossibleAgent])
def test_to_parallel_keeps_a_reward_for_an_agent_not_observed_yet_until_it_joins(make):
    # It went out under the agent's id at once (PettingZoo's parallel_to_aec then failed its
    # api_test: "agents should not be given a reward if they were terminated or truncated").
    expected = {a: r for a, r in rollout(make(), seed=0).returns.items() if r}
    assert _parallel_returns(to_parallel(make())) == expected
    assert rollout(ParallelPettingZooEnv(to_parallel(make())), seed=0).returns == expected
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(parallel_to_aec(to_parallel(make())), num_cycles=10)
    assert "Passed API test" in printed.getvalue()


@pytest.mark.parametrize("ends_b", [False, True], ids=["episode-ends", "b-ends-unobserved"])
def test_to_parallel_hands_out_a_reward_that_cannot_wait_under_its_agent(ends_b):
    env = to_parallel(PaidButNeverJoins(ends_b=ends_b))
    env.reset(seed=0)
    assert env.step({"a": 0})[1] == {"a": 1.0}  # b's 5.0 waits
    obs, rewards, terminations, _, _ = env.step({"a": 0})
    assert list(obs) == ["a"] and terminations == {"a": False}
    assert rewards == ({"a": 1.0, "b": 5.0} if ends_b else {"a": 1.0})
    assert _parallel_returns(to_parallel(PaidButNeverJoins(ends_b=ends_b)), strict=False) == {"a": 3.0, "b": 5.0}
    bridged = lambda: ParallelPettingZooEnv(to_parallel(PaidButNeverJoins(ends_b=ends_b)))  # noqa: E731
    assert rollout(bridged(), seed=0).returns == {"a": 3.0, "b": 5.0}
    assert check_env(bridged).ok


class InfoBeforeJoining(PaysBeforeJoining):
    """PaysBeforeJoining whose reset and first step give ``b`` an info before it is observed."""

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"b": {"joins_in": 2}}

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, _ = super().step(action_dict)
        return obs, rewards, terminateds, truncateds, ({"b": {"joins_in": 1}} if self.t == 1 else {})


@pytest.mark.parametrize("export", [to_aec, to_parallel])
def test_infos_for_agents_outside_the_step_are_kept_in_common_infos(export):
    # Both exports dropped them: the round trips then lost them.
    env = export(InfoBeforeJoining())
    reset_infos = env.reset(seed=0)
    assert env.common_infos == {"b": {"joins_in": 2}}
    step_infos = env.step({"a": 0} if export is to_parallel else 0)
    assert env.common_infos == {"b": {"joins_in": 1}}
    assert "b" not in (reset_infos[1] if export is to_parallel else env.infos)
    assert export is to_aec or "b" not in step_infos[4]
    bridge = ParallelPettingZooEnv if export is to_parallel else PettingZooEnv
    through = [t.infos.get("__common__") for t in play(bridge(export(InfoBeforeJoining())), seed=0)]
    assert through[:2] == [{"b": {"joins_in": 2}}, {"b": {"joins_in": 1}}] and not any(through[2:])


class PaysAfterLeaving(PaysBeforeJoining):
    """``a`` and ``b`` act; ``b`` terminates at step 1 and is paid 2.0 at step 2 (too late)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict):
        self.t += 1
        obs = {x: np.full(1, self.t, np.float32) for x in action_dict}
        rewards = {**dict.fromkeys(action_dict, 1.0), **({"b": 2.0} if self.t == 2 else {})}
        self.agents = ["a"]
        done = self.t >= 3
        return obs, rewards, {ALL: done, "a": done, "b": self.t == 1}, {ALL: False}, {}


def test_a_reward_for_an_agent_that_left_goes_out_from_to_parallel_and_is_logged_by_to_aec(caplog):
    assert _parallel_returns(to_parallel(PaysAfterLeaving()), strict=False) == {"a": 3.0, "b": 3.0}
    assert "after it left" not in caplog.text
    assert _aec_returns(to_aec(PaysAfterLeaving())) == {"a": 3.0, "b": 1.0}
    assert "gave agent 'b' a reward of 2.0 after it left; an AEC env cannot deliver it" in caplog.text


class PaysZeroAfterLeaving(PaysAfterLeaving):
    """``b`` terminates at step 1; every step pays both agents, ``b`` 0.0 after it left."""

    def step(self, action_dict):
        obs, _, *rest = super().step(action_dict)
        return (obs, {"a": 1.0, "b": 0.0 if self.t > 1 else 1.0}, *rest)


def test_a_zero_for_an_agent_that_left_is_not_a_reward_to_report(caplog):
    # to_parallel put it in rewards ("Agent was given reward but was dead last turn" in
    # parallel_api_test) and to_aec logged a reward it could not deliver, at every step.
    env = to_parallel(PaysZeroAfterLeaving())
    env.reset(seed=0)
    assert env.step({"a": 0, "b": 0})[1] == {"a": 1.0, "b": 1.0}
    assert env.step({"a": 0})[1] == env.step({"a": 0})[1] == {"a": 1.0}
    assert _aec_returns(to_aec(PaysZeroAfterLeaving())) == {"a": 3.0, "b": 1.0}
    assert "after it left" not in caplog.text


def test_to_aec_dead_steps_take_none_and_late_agents_join():
    env = to_aec(JoinLeaveEnv())
    env.reset(seed=0)
    assert env.agents == ["scout"]
    joined, finals = [], []
    for agent_id in env.agent_iter():
        _, _, terminated, truncated, _ = env.last()
        if agent_id not in joined:
            joined.append(agent_id)
        if terminated or truncated:
            finals.append((agent_id, terminated, truncated))
            with pytest.raises(InvalidActionError, match=f"'{agent_id}'"):
                env.step(1)
            env.step(None)
        else:
            env.step(1)
    assert joined == ["scout", "runner", "keeper"]
    assert finals == [("scout", True, False), ("runner", False, True), ("keeper", True, False)]
    with pytest.raises(ResetNeededError):
        env.step(None)


def test_to_parallel_checks_actions_before_stepping():
    env = to_parallel(RockPaperScissors())
    env.reset(seed=0)
    with pytest.raises(UnexpectedActionError, match="'player3'"):
        env.step({"player1": 0, "player2": 1, "player3": 0})
    with pytest.raises(MissingActionError, match="player2"):
        env.step({"player1": 0})
    with pytest.raises(InvalidActionError, match="player2"):
        env.step({"player1": 0, "player2": np.float32(1.5)})
    obs, rewards, terminations, _, infos = env.step({"player1": 0, "player2": 1})
    assert rewards == {"player1": -1, "player2": 1}
    assert "__all__" not in terminations and set(obs) == set(infos) == {"player1", "player2"}


def test_pettingzoo_env_takes_a_to_parallel_export_converted_by_pettingzoo():
    # It took the export for to_aec's (which tells which agents it observed) and, when an agent ended,
    # raised AttributeError: 'MultiAgentParallelEnv' object has no attribute 'observed'.
    through = rollout(PettingZooEnv(parallel_to_aec(to_parallel(JoinLeaveEnv()))), seed=0)
    direct = rollout(JoinLeaveEnv(), seed=0)
    assert through.returns == pytest.approx(direct.returns)
    assert sorted(through.agents_seen) == sorted(direct.agents_seen)


class TextInCommon(InfoBeforeJoining):
    """InfoBeforeJoining whose "__common__" infos are not dicts: a string at reset, a number after."""

    def reset(self, *, seed=None, options=None):
        obs, infos = super().reset(seed=seed, options=options)
        return obs, {**infos, "__common__": "hello"}

    def step(self, action_dict):
        *result, infos = super().step(action_dict)
        return (*result, {**infos, "__common__": self.t})


@pytest.mark.parametrize("export", [to_aec, to_parallel])
def test_common_infos_that_are_not_dicts_are_kept_beside_other_agents_infos(export):
    # Merged with b's info, "hello" and 1 were dropped ({**({} if not a dict), **extra}).
    env = export(TextInCommon())
    env.reset(seed=0)
    assert env.common_infos == {"__common__": "hello", "b": {"joins_in": 2}}
    env.step({"a": 0} if export is to_parallel else 0)
    assert env.common_infos == {"__common__": 1, "b": {"joins_in": 1}}
    env.step({a: 0 for a in env.agents} if export is to_parallel else 0)
    assert env.common_infos == 2  # alone, it stays as it is
