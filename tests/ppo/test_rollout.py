from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from marl_core import rollout
from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import ConfigError, EnvContractError
from marl_core.ppo.config import DEFAULT_MODEL
from marl_core.ppo.model import TorchPolicy
from marl_core.ppo.rollout import LearnedSpec, Sampler
from marl_core.spaces import check_action_dict
from tests.fixtures.envs import IrregularOrderEnv, JoinLeaveEnv
from tests.ppo.helpers import (
    CorruptingRockPaperScissors,
    FlakyRockPaperScissors,
    FloatObservationGame,
    TwoMoveGame,
    install_policies,
)


def _sampler(env_cls, num_envs=2, mapping=lambda agent_id, episode: "p", gamma=1.0, lambda_=1.0, env_config=None,
             **kwargs):
    probe = env_cls()
    agent = probe.possible_agents[0]
    spec = LearnedSpec(probe.get_observation_space(agent), probe.get_action_space(agent), dict(DEFAULT_MODEL),
                       gamma, lambda_)
    sampler = Sampler(env_cls, env_config or {}, num_envs, seed=0, **kwargs)
    install_policies(sampler, {"p": spec} if not isinstance(mapping, dict) else mapping, mapping, {"p"})
    return sampler


def test_turn_based_reward_goes_to_the_last_move_of_each_player():
    mapping = lambda agent_id, episode: agent_id  # noqa: E731
    probe = TwoMoveGame()
    spec = LearnedSpec(probe.observation_spaces["first"], probe.action_spaces["first"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(TwoMoveGame, {}, 3, seed=0)
    install_policies(sampler, {"first": spec, "second": spec}, mapping, {"first", "second"})
    out = sampler.sample(30)  # 15 games of two steps each, over 3 envs
    first, second = out["batches"]["first"], out["batches"]["second"]
    assert len(first["rewards"]) == len(second["rewards"]) == 15
    moves_first, moves_second = first["actions"][:, 0], second["actions"][:, 0]
    expected = np.sign(moves_first - moves_second)
    # The outcome arrives after the second player's move; it is credited to the first player's
    # move of the step before, and the bystander reward 0.25 (before "second" ever acted) is not.
    np.testing.assert_array_equal(first["rewards"], expected)
    np.testing.assert_array_equal(second["rewards"], -expected)
    assert set(moves_first.tolist()) <= {0.0, 1.0} and set(moves_second.tolist()) <= {0.0, 1.0}  # masked: never 2
    # Terminal: no bootstrap, so with gamma = lambda = 1 the return is the reward itself.
    np.testing.assert_allclose(first["returns"], expected)
    second_returns = [e["return"] for e in out["episodes"] if e["agent_id"] == "second"]
    assert sorted(second_returns) == sorted((-expected + 0.25).tolist())


def test_no_reward_is_lost_across_batches_and_bystander_rewards_are_credited():
    sampler = _sampler(IrregularOrderEnv, num_envs=2)
    credited = finished_returns = 0.0
    for _ in range(5):
        out = sampler.sample(37)  # batch boundaries fall in the middle of episodes
        credited += float(out["batches"]["p"]["rewards"].sum())
        finished_returns += sum(e["return"] for e in out["episodes"])
    pending = sum(sum(t.rewards) for trajectories in sampler.trajectories for t in trajectories.values())
    open_returns = sum(sum(episode.returns.values()) for episode in sampler.episodes)
    # Every reward is credited exactly once, except the 0.5 that agent_2 receives in the first
    # step of each episode, before it has made any move.
    episodes_started = sampler._episode_counter
    assert credited + pending == pytest.approx(finished_returns + open_returns - 0.5 * episodes_started)
    assert credited > 0


class PaysTheFallen(MultiAgentEnv):
    """``a`` and ``b`` move together; ``a`` terminates after the first step (``truncate``: is cut
    short) and ``b`` plays two more. Every step pays both agents 1, ``a`` too after it ended."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: gym.spaces.Box(0.0, 3.0, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: gym.spaces.Discrete(2) for x in self.possible_agents}
        self.truncate = bool((config or {}).get("truncate", False))
        self.final = bool((config or {}).get("final", True))  # False: a's end comes without a final obs
        self.end_by_truncation = bool((config or {}).get("end_by_truncation", False))
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        self.t += 1
        a_ends = self.t == 1
        obs = {x: np.full(1, self.t, np.float32) for x in self.agents if self.final or not (x == "a" and a_ends)}
        terminateds = {"a": a_ends and not self.truncate, ALL: self.t == 3 and not self.end_by_truncation}
        truncateds = {"a": a_ends and self.truncate, ALL: self.t == 3 and self.end_by_truncation}
        if a_ends:
            self.agents = ["b"]
        if self.t == 3:
            terminateds["b"], self.agents = True, []
        return obs, {"a": 1.0, "b": 1.0}, terminateds, truncateds, {}


class TheFallenReturn(PaysTheFallen):
    """:class:`PaysTheFallen` whose ``a`` shows up in the obs dict again after it ended."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step({x: a for x, a in action_dict.items() if x != "a"}
                                                                    if self.t >= 1 else action_dict)
        if self.t == 2:
            obs["a"] = np.full(1, 2.0, np.float32)
        return obs, rewards, terminateds, truncateds, infos


@pytest.mark.parametrize("trained", [True, False])
def test_an_agent_that_comes_back_after_its_end_is_an_error(trained):
    probe = PaysTheFallen()
    spec = LearnedSpec(probe.observation_spaces["a"], probe.action_spaces["a"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(TheFallenReturn, {}, 1, seed=0)
    policies = {"p": spec, "fixed": lambda observation: 0}
    install_policies(sampler, policies, lambda agent_id, episode: "p" if trained or agent_id == "b" else "fixed", {"p"})
    with pytest.raises(EnvContractError, match=r"agents \['a'\] of env 0 terminated or truncated earlier"):
        sampler.sample(6)


@pytest.mark.parametrize("truncate", [False, True])
def test_rewards_after_an_agents_own_end_are_credited_to_its_last_action(truncate):
    probe = PaysTheFallen()
    spec = LearnedSpec(probe.observation_spaces["a"], probe.action_spaces["a"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(PaysTheFallen, {"truncate": truncate}, 1, seed=0)
    install_policies(sampler, {"a": spec, "b": spec}, lambda agent_id, episode: agent_id, {"a", "b"})
    out = sampler.sample(6)  # two episodes of three steps
    np.testing.assert_array_equal(out["batches"]["a"]["rewards"], [3.0, 3.0])  # its own step and two more
    np.testing.assert_array_equal(out["batches"]["b"]["rewards"], [1.0] * 6)
    batch_a = out["batches"]["a"]
    if truncate:  # cut short: bootstrapped with the value of its final observation
        assert not np.allclose(batch_a["returns"], batch_a["rewards"])
    else:  # terminated: gamma = lambda = 1 and no bootstrap, so the return is the reward
        np.testing.assert_allclose(batch_a["returns"], batch_a["rewards"])
    assert sorted(e["return"] for e in out["episodes"] if e["agent_id"] == "a") == [3.0, 3.0]


@pytest.mark.parametrize("truncate", [False, True])
def test_an_agent_flagged_without_a_final_observation_ends_as_flagged(truncate):
    # Its flag was read only from the step that ended the episode, where it no longer appears:
    # terminated, it was bootstrapped when the episode was truncated; truncated, it was not when
    # the episode terminated.
    probe = PaysTheFallen()
    spec = LearnedSpec(probe.observation_spaces["a"], probe.action_spaces["a"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(PaysTheFallen, {"truncate": truncate, "final": False, "end_by_truncation": not truncate}, 1,
                      seed=0)
    install_policies(sampler, {"a": spec, "b": spec}, lambda agent_id, episode: agent_id, {"a", "b"})
    # Weights shifted off their initialization: a value of 0 for the zero observation would hide a bootstrap.
    policy = TorchPolicy(spec.observation_space, spec.action_space, spec.model_config)
    sampler.set_weights({"a": {name: value + 0.1 for name, value in policy.get_weights().items()}})
    batch = sampler.sample(3)["batches"]["a"]
    np.testing.assert_array_equal(batch["rewards"], [3.0])
    # Truncated: bootstrapped with the value of its last observation (the one it acted on).
    bootstrap = float(sampler.policies["a"].value(np.zeros((1, 1), np.float32))[0]) if truncate else 0.0
    assert abs(bootstrap) > 1e-3 or not truncate
    np.testing.assert_allclose(batch["returns"], [3.0 + bootstrap], rtol=1e-6)


def test_late_joiners_and_early_leavers():
    sampler = _sampler(JoinLeaveEnv, num_envs=2)
    out = sampler.sample(16)  # 8 steps per episode, 2 envs: two episodes each? one each
    lengths = {(e["agent_id"]): e["length"] for e in out["episodes"]}
    assert lengths == {"scout": 4, "runner": 4, "keeper": 5}
    batch = out["batches"]["p"]
    assert len(batch["rewards"]) == 2 * (4 + 4 + 5) - sum(
        len(t.rewards) for trajectories in sampler.trajectories for t in trajectories.values())


def test_env_errors_rebuild_the_env_and_drop_its_episode():
    sampler = _sampler(FlakyRockPaperScissors, num_envs=2, env_config={"fail_every": 23})
    out = sampler.sample(100)
    assert out["num_env_errors"] >= 2
    assert out["env_steps"] >= 100
    # Every finished episode is complete (10 moves); the dropped ones never show up.
    assert {e["length"] for e in out["episodes"]} == {10}


class SecondResetFails(TwoMoveGame):
    """:class:`TwoMoveGame` whose second ``reset`` in this process (after the first game) raises."""

    resets = [0]

    def reset(self, *, seed=None, options=None):
        SecondResetFails.resets[0] += 1
        if SecondResetFails.resets[0] == 2:
            raise RuntimeError("reset refused after the first game")
        return super().reset(seed=seed, options=options)


def test_a_reset_that_fails_after_a_game_keeps_the_game_and_starts_the_rebuilt_env():
    mapping = lambda agent_id, episode: agent_id  # noqa: E731
    probe = TwoMoveGame()
    spec = LearnedSpec(probe.observation_spaces["first"], probe.action_spaces["first"], dict(DEFAULT_MODEL), 1.0, 1.0)
    SecondResetFails.resets[0] = 0
    sampler = Sampler(SecondResetFails, {}, 1, seed=0)
    install_policies(sampler, {"first": spec, "second": spec}, mapping, {"first", "second"})
    out = sampler.sample(10)  # five games of two steps; the reset after the first one fails
    # The env (strict about who acts) was rebuilt once and never received a move out of turn.
    assert out["num_env_errors"] == sampler.num_env_errors == 1
    assert out["env_steps"] == 10
    finished = [e for e in out["episodes"] if e["agent_id"] == "first"]
    assert len(finished) == 5  # the first game too: its results were kept
    assert len(out["batches"]["first"]["rewards"]) == len(out["batches"]["second"]["rewards"]) == 5


class NoLegalMoveForSecond(TwoMoveGame):
    """:class:`TwoMoveGame` whose ``second`` is asked to act with a mask that allows nothing."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if "second" in obs and not terminateds.get("second"):
            obs = {"second": {**obs["second"], "action_mask": np.zeros(3, np.int8)}}
        return obs, rewards, terminateds, truncateds, infos


def test_an_agent_asked_to_act_without_a_legal_action_is_named():
    mapping = lambda agent_id, episode: "p"  # noqa: E731
    probe = TwoMoveGame()
    spec = LearnedSpec(probe.observation_spaces["first"], probe.action_spaces["first"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(NoLegalMoveForSecond, {}, 2, seed=0)
    install_policies(sampler, {"p": spec}, mapping, {"p"})
    with pytest.raises(EnvContractError, match=r"\[\(0, 'second'\), \(1, 'second'\)\] of policy 'p' must act"):
        sampler.sample(10)


@pytest.mark.parametrize(
    ("observation", "match"),
    [
        (np.array([np.nan, 0.0], np.float32),
         r"observation of agent 'second' in env 0 of runner 0 holds NaN or infinity: \{'observation': array\(\[nan,  0\.\]"),
        (np.array([np.inf, 0.0], np.float32), r"agent 'second' in env 0 of runner 0 holds NaN or infinity"),
        (np.zeros(3, np.float32),
         r"runner 0: observations outside their spaces: agent 'second' in env 0: at \['observation'\]: shape \(3,\)"),
        ("text", r"agent 'second' in env 0: at \['observation'\]: a str where the space needs a numpy array"),
    ],
)
def test_an_observation_the_policy_cannot_take_is_named_before_it_reaches_the_model(observation, match):
    sampler = _sampler(FloatObservationGame, env_config={"observation": observation})
    with pytest.raises(EnvContractError, match=match):
        sampler.sample(10)


class _TruncatedWithFinal(TwoMoveGame):
    """:class:`TwoMoveGame` truncated (not terminated) at its end, with ``config["final"]`` as
    ``first``'s final observation."""

    def __init__(self, config=None):
        super().__init__(config)
        self.final = (config or {}).get("final", np.zeros(2, np.float32))

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        if terminateds.get(ALL):
            obs = {**obs, "first": {**obs["first"], "observation": self.final}}
            return obs, rewards, dict.fromkeys(terminateds, False), dict.fromkeys(terminateds, True), infos
        return obs, rewards, terminateds, truncateds, infos


@pytest.mark.parametrize(
    ("final", "match"),
    [(np.array([np.nan, 0.0], np.float32), r"final observation of agent 'first' in env 0 of runner 0 holds NaN or "
                                           r"infinity: .*its value bootstraps the agent's returns"),
     (np.zeros(3, np.float32), r"runner 0: final observations outside their spaces: agent 'first' in env 0: at "
                               r"\['observation'\]: shape \(3,\) but the space needs \(2,\)")],
)
def test_a_truncated_agents_final_observation_is_checked_before_its_value_is_taken(final, match):
    # NaN went into the bootstrap value, and the update then blamed "advantages ... too large".
    sampler = _sampler(_TruncatedWithFinal, env_config={"final": final})
    with pytest.raises(EnvContractError, match=match):
        sampler.sample(10)


class _OneBufferForAll(MultiAgentEnv):
    """``a`` and ``b`` act together; ``a`` is truncated after step 1, ``b`` plays on to step 3.
    Every observation is one array the env rewrites at each step (the state both agents see)."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {a: gym.spaces.Box(0.0, 10.0, (2,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}
        self.state = np.zeros(2, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents, self.t = ["a", "b"], 0
        self.state[:] = 0.0
        return {"a": self.state, "b": self.state}, {}

    def step(self, action_dict):
        self.t += 1
        self.state[:] = self.t
        if self.t == 1:
            self.agents = ["b"]
            return ({"a": self.state, "b": self.state}, {"a": 1.0, "b": 0.0}, {ALL: False},
                    {"a": True, ALL: False}, {})
        return {"b": self.state}, {"b": 0.0}, {ALL: self.t >= 3}, {ALL: False}, {}


def test_a_final_observation_kept_until_the_episode_ends_is_a_copy():
    # The sync vector hands over the env's own arrays: the truncated agent's final observation,
    # kept to bootstrap its value at the episode's end, read the state of a later step.
    sampler = _sampler(_OneBufferForAll, num_envs=1)
    sampler.sample(2)  # step 1 truncates "a", step 2 rewrites the array
    terminated, final_obs, has_final = sampler.ended[0]["a"]
    assert (terminated, has_final) == (False, True)
    np.testing.assert_array_equal(final_obs, [1.0, 1.0])


class _FirstActs(MultiAgentEnv):
    """Two agents with Box observations and Discrete(2) actions; the first in ``AGENTS`` acts first."""

    AGENTS: tuple[str, str] = ("a", "b")

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = list(self.AGENTS)
        self.observation_spaces = {a: gym.spaces.Box(0.0, 1.0, (2,), np.float32) for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents = [self.AGENTS[0]]
        return {self.AGENTS[0]: np.zeros(2, np.float32)}, {}


class _PaysTheBystander(_FirstActs):
    """``player`` acts once and wins +1; ``bystander`` is never asked to act but pays -1."""

    AGENTS = ("player", "bystander")

    def step(self, action_dict):
        self.agents = []
        return {}, {"player": 1.0, "bystander": -1.0}, {ALL: True}, {ALL: False}, {}


def test_an_agent_paid_but_never_asked_to_act_counts_in_the_episode_metrics():
    # Its reward was left out of the finished episodes (zero-sum games read as positive-sum), while
    # marl_core.rollout counts every agent rewarded.
    episodes = _sampler(_PaysTheBystander, num_envs=1).sample(3)["episodes"]
    assert {(e["agent_id"], e["return"], e["length"]) for e in episodes} == {("player", 1.0, 1), ("bystander", -1.0, 0)}
    assert len(episodes) == 6 and {e["policy_id"] for e in episodes} == {"p"}


class _PaysAReferee(_PaysTheBystander):
    """Pays ``referee`` too, an id it never lists (an ``ids.known`` slip the checker reports)."""

    def step(self, action_dict):
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        return obs, {**rewards, "referee": 0.0}, terminateds, truncateds, infos


def test_a_paid_id_the_mapping_fn_refuses_is_left_out_and_others_count_as_rollout_counts_them():
    # A dict-lookup mapping fn was asked about "referee" and stopped training with its KeyError.
    mapping = {"player": "p", "bystander": "p"}
    episodes = _sampler(_PaysAReferee, num_envs=1, mapping=lambda agent_id, episode: mapping[agent_id]).sample(2)
    assert {e["agent_id"] for e in episodes["episodes"]} == {"player", "bystander"}
    episodes = _sampler(_PaysAReferee, num_envs=1).sample(2)["episodes"]  # a mapping fn that takes any id
    assert {e["agent_id"] for e in episodes} == set(rollout(_PaysAReferee(), seed=0).returns)


def test_a_paid_only_agent_the_mapping_fn_refuses_is_named_once_and_a_wrong_policy_id_still_raises(caplog):
    mapping = {"player": "p"}  # a typo'd table: "bystander" missing
    with caplog.at_level("WARNING", logger="marl_core.ppo.rollout"):
        _sampler(_PaysTheBystander, num_envs=1, mapping=lambda agent_id, episode: mapping[agent_id]).sample(3)
    assert caplog.text.count("agent 'bystander' was paid but never asked to act: its rewards are left out") == 1
    with pytest.raises(ConfigError, match="mapped agent 'bystander' to 'q', which is not a policy"):
        _sampler(_PaysTheBystander, num_envs=1, mapping=lambda agent_id, episode: {"player": "p"}.get(agent_id, "q")
                 ).sample(2)


class _OneMoveEach(_FirstActs):
    """``a`` moves, then ``b``, and the game ends: +1 for ``a``, -1 for ``b``."""

    def step(self, action_dict):
        if "a" in action_dict:
            self.agents = ["b"]
            return {"b": np.zeros(2, np.float32)}, {}, {ALL: False}, {ALL: False}, {}
        self.agents = []
        return {}, {"a": 1.0, "b": -1.0}, {ALL: True}, {ALL: False}, {}


def test_an_agent_whose_policy_was_removed_is_not_credited_to_another():
    # Remapped at the episode's end as if it had never acted: the removed policy's game went to "new".
    probe = _OneMoveEach()
    spec = LearnedSpec(probe.get_observation_space("a"), probe.get_action_space("a"), dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(_OneMoveEach, {}, 1, seed=0)
    install_policies(sampler, {"old": spec, "new": spec, "p": spec}, lambda a, e: "old" if a == "a" else "p", {"p"})
    sampler.sample(1)  # "a" has moved under "old"
    install_policies(sampler, {"new": spec, "p": spec}, lambda a, e: "new" if a == "a" else "p", {"p"})
    episodes = sampler.sample(1)["episodes"]
    assert [(e["agent_id"], e["policy_id"], e["return"]) for e in episodes] == [("b", "p", -1.0)]


class _BrokenModule(torch.nn.Module):
    def __init__(self, observation_space, action_space, config):
        super().__init__()
        self.layer = torch.nn.Linear(2, 4)

    def forward(self, obs):
        raise RuntimeError("a bug in the module")


class _Float64Game(TwoMoveGame):
    """:class:`TwoMoveGame` observing float64 arrays in its float32 Box (they are cast, and fit)."""

    def _obs(self, turn):
        return {**super()._obs(turn), "observation": np.array([turn, 1 - turn], np.float64)}


def test_an_error_of_the_model_is_not_blamed_on_observations_it_can_take():
    # It was "observations outside their spaces: ... dtype float64 but the space needs float32".
    sampler = Sampler(_Float64Game, {}, 2, seed=0)
    probe = TwoMoveGame()
    spec = LearnedSpec(probe.observation_spaces["first"], probe.action_spaces["first"],
                       {**DEFAULT_MODEL, "module": _BrokenModule}, 1.0, 1.0)
    sampler.set_policies({"p": spec}, lambda agent_id, episode: "p", {"p"})
    with pytest.raises(RuntimeError, match="a bug in the module"):
        sampler.sample(10)


@pytest.mark.parametrize(
    ("observation", "match"),
    [(7, r"agent 'player2' in env 0: 7 is outside Discrete\(3\) \(valid: 0\.\.2\); agent 'player2' in env 1"),
     (-1, r"agent 'player2' in env 0: -1 is outside Discrete\(3\)"),
     # A float that an integer cast would have changed (1.5 -> 1) silently.
     (1.5, r"agent 'player2' in env 0: .*1\.5.*Discrete\(3\)")],
)
def test_a_discrete_observation_outside_its_space_is_named(observation, match):
    sampler = _sampler(CorruptingRockPaperScissors, env_config={"obs": observation})
    with pytest.raises(EnvContractError, match=match):
        sampler.sample(20)


@pytest.mark.parametrize(
    ("reward", "match"),
    [(float("nan"), r"env 0 of runner 0 gave agent 'player2' a reward of nan; rewards must be finite"),
     (np.float32("-inf"), r"gave agent 'player2' a reward of -inf"),
     ("1", r"env 0 of runner 0 gave agent 'player2' a reward that is not one number: '1'"),
     (np.ones(2), r"gave agent 'player2' a reward that is not one number: array\(\[1\., 1\.\]\)")],
)
def test_a_reward_that_is_not_a_finite_number_is_named(reward, match):
    sampler = _sampler(CorruptingRockPaperScissors, env_config={"reward": reward})
    with pytest.raises(EnvContractError, match=match):
        sampler.sample(20)


@pytest.mark.parametrize(
    ("choose", "match"),
    [(lambda observation: 7, r"fixed policy 'p' chose for agent 'first': invalid action for agent 'first': expected "
                             r"an action in Discrete\(3\), received 7"),
     (lambda observation: 2, r"fixed policy 'p' chose for agent 'first': illegal action for agent 'first': received 2, "
                             r"legal actions now: \[0, 1\]")],
)
def test_a_fixed_policys_action_outside_the_space_or_masked_out_is_refused_by_name(choose, match):
    # The vector does not check actions; a fixed policy's 7 or masked 2 reached envs that do not check either.
    sampler = Sampler(TwoMoveGame, {}, 2, seed=0)
    sampler.set_policies({"p": choose}, lambda agent_id, episode: "p", set())
    with pytest.raises(ConfigError, match=match):
        sampler.sample(4)
    sampler = Sampler(TwoMoveGame, {}, 2, seed=0)
    sampler.set_policies({"p": lambda observation: 1}, lambda agent_id, episode: "p", set())
    assert sampler.sample(4)["env_steps"] == 4


class _TupleMaskGame(TwoMoveGame):
    """:class:`TwoMoveGame` whose masks are tuples of 0/1 (a form the checker reports, but a mask)."""

    def _obs(self, turn):
        return {**super()._obs(turn), "action_mask": (0, 1, 1)}


def test_a_fixed_policy_is_held_to_a_mask_in_another_form_too():
    sampler = Sampler(_TupleMaskGame, {}, 2, seed=0)
    sampler.set_policies({"p": lambda observation: 0}, lambda agent_id, episode: "p", set())
    with pytest.raises(ConfigError, match=r"fixed policy 'p' chose for agent 'first': illegal action"):
        sampler.sample(4)


def test_a_mapping_fn_that_raises_is_named_with_the_agent_and_how_it_is_called():
    old_style = lambda agent_id, episode, worker: "p"  # noqa: E731  (RLlib's older signature)
    sampler = _sampler(TwoMoveGame, mapping=old_style)
    with pytest.raises(ConfigError, match=(
            r"policy_mapping_fn raised TypeError for agent 'first': .*missing 1 required positional argument: "
            r"'worker'; it is called as policy_mapping_fn\(agent_id, episode\)")):
        sampler.sample(4)


def test_an_env_that_always_fails_stops_the_sampler_with_a_clear_error():
    sampler = _sampler(FlakyRockPaperScissors, num_envs=1, max_env_errors_in_a_row=3, env_config={"fail_every": 1})
    with pytest.raises(EnvContractError, match="failed 3 times in a row; last error: RuntimeError"):
        sampler.sample(10)
    assert sampler.num_env_errors == 3


def test_an_env_that_fails_in_every_episode_stops_sampling_though_its_steps_succeed():
    # Each instance fails at its 5th step of a 10-step game: steps succeed, no episode ever ends.
    sampler = _sampler(FlakyRockPaperScissors, num_envs=1, max_env_errors_in_a_row=3, env_config={"fail_every": 5})
    with pytest.raises(EnvContractError, match="env 0 of runner 0 failed 3 times in a row; last error: RuntimeError"):
        sampler.sample(100)


def test_a_sample_names_its_first_env_error():
    sampler = _sampler(FlakyRockPaperScissors, num_envs=2, env_config={"fail_every": 23})
    out = sampler.sample(60)
    assert out["num_env_errors"] >= 2  # each env fails once, and every finished episode resets the count
    assert out["first_env_error"] == "env 0 of runner 0: RuntimeError: flaky env fails at its step call 23"
    assert sampler.sample(4)["first_env_error"] is None


def test_async_vector_samples_exactly_what_sync_samples_rebuilds_included():
    outs = []
    for mode in ("sync", "async"):
        sampler = _sampler(FlakyRockPaperScissors, num_envs=3, env_config={"fail_every": 7}, vector_mode=mode,
                           vector_num_workers=None if mode == "sync" else 2)
        try:
            assert sampler.vector.mode == mode
            outs.append([sampler.sample(40) for _ in range(2)])
        finally:
            sampler.close()
    for sync_out, async_out in zip(*outs, strict=True):
        assert sync_out["num_env_errors"] == async_out["num_env_errors"] > 0
        assert sync_out["env_steps"] == async_out["env_steps"] >= 40
        assert sync_out["episodes"] == async_out["episodes"]
        for key in ("obs", "actions", "rewards"):  # each sampler initializes its own model: logp/values differ
            np.testing.assert_array_equal(sync_out["batches"]["p"][key], async_out["batches"]["p"][key])


def test_a_failing_env_leaves_the_other_envs_episodes_alone():
    built = []

    def creator(config):  # the second env built is flaky; everything else (its rebuild too) is not
        built.append(1)
        return FlakyRockPaperScissors({"fail_every": 5 if len(built) == 2 else 10**9})

    probe = FlakyRockPaperScissors()
    spec = LearnedSpec(probe.get_observation_space("player1"), probe.get_action_space("player1"),
                       dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(creator, {}, 2, seed=0)
    install_policies(sampler, {"p": spec}, lambda agent_id, episode: "p", {"p"})
    out = sampler.sample(42)
    assert out["num_env_errors"] == 1 and len(built) == 3
    # 22 vector steps (ended envs are reset within the step that ended them): env 0 plays two
    # whole episodes of 10 steps; env 1 fails at vector step 5 (its 4 steps are dropped), then
    # plays one rebuilt episode (vector steps 6-15). Had the failure reset every env, env 0's first
    # episode would be lost too.
    assert out["env_steps"] == 2 * 22 - 1
    assert len({e["episode_id"] for e in out["episodes"]}) == 3 and len(out["episodes"]) == 6
    assert {e["length"] for e in out["episodes"]} == {10}
    sampler.close()


class _TakeTurns(MultiAgentEnv):
    """``a`` acts at even steps, ``b`` at odd ones; at step t both get 10 * t; six steps in all."""

    def __init__(self, config=None):
        super().__init__()
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: gym.spaces.Box(0, 10, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: gym.spaces.Discrete(2) for x in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {"a": np.zeros(1, np.float32)}, {}

    def step(self, action_dict):
        self.t += 1
        rewards = {"a": 10.0 * self.t, "b": 10.0 * self.t}
        if self.t == 6:
            return {}, rewards, {ALL: True}, {ALL: False}, {}
        return {"ab"[self.t % 2]: np.full(1, self.t, np.float32)}, rewards, {ALL: False}, {ALL: False}, {}


def test_an_action_is_not_credited_with_rewards_after_its_policy_stopped_training():
    # a's move at t0 stayed open while a was not trained (its move at t2 went unrecorded) and
    # collected the rewards of t1-t4: 100, instead of its own 10 + 20.
    probe = _TakeTurns()
    spec = LearnedSpec(probe.observation_spaces["a"], probe.action_spaces["a"], dict(DEFAULT_MODEL), 1.0, 1.0)
    sampler = Sampler(_TakeTurns, {}, 1, seed=0)
    mapping = lambda agent_id, episode: agent_id  # noqa: E731
    install_policies(sampler, {"a": spec, "b": spec}, mapping, {"a", "b"})
    sampler.sample(1)  # a acts at t0
    sampler.set_policies({"a": spec, "b": spec}, mapping, {"b"})
    sampler.sample(2)  # b at t1, a at t2 (not recorded)
    sampler.set_policies({"a": spec, "b": spec}, mapping, {"a", "b"})
    batches = [sampler.sample(1)["batches"] for _ in range(3)]  # b at t3, a at t4, b at t5: the end
    a_rewards = [reward for batch in batches if "a" in batch for reward in batch["a"]["rewards"].tolist()]
    assert a_rewards == [50.0 + 60.0]  # a's move at t4 only
