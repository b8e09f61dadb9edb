"""Tests of marl_core.grouping: GroupAgentsWrapper and MultiAgentEnv.with_agent_groups."""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from marl_core.conformance import check_env
from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import (
    EnvContractError,
    GroupingError,
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    SpaceError,
    UnexpectedActionError,
    UnknownAgentError,
    VectorEnvError,
)
from marl_core.grouping import GroupAgentsWrapper
from marl_core.rollout import RandomPolicy, play, rollout
from marl_core.spaces import check_action_dict, mask_from_legal, masked_space
from marl_core.vector import VectorMultiAgentEnv, gather, scatter
from tests.fixtures.envs import (
    HeterogeneousSpacesEnv,
    IrregularOrderEnv,
    JoinLeaveEnv,
    ManyAgentsEnv,
    RockPaperScissors,
    TicTacToe,
)

# Construction -------------------------------------------------------------------------------


def test_groups_become_agents_with_tuple_spaces_in_member_order(caplog: pytest.LogCaptureFixture) -> None:
    inner = HeterogeneousSpacesEnv()
    with caplog.at_level(logging.WARNING, logger="marl_core.grouping"):
        env = inner.with_agent_groups({"pair": ["masked", "box"]})
    assert caplog.text == ""  # a masked member is no cause for alarm: every consumer reads slot masks
    assert isinstance(env, GroupAgentsWrapper) and env.env is inner
    assert env.possible_agents == ["pair", "discrete", "multi"]
    assert env.get_observation_space("pair") == spaces.Tuple(
        [inner.get_observation_space("masked"), inner.get_observation_space("box")]
    )
    assert env.get_action_space("pair") == spaces.Tuple([spaces.Discrete(4), inner.get_action_space("box")])
    assert env.observation_spaces["discrete"] is inner.observation_spaces["discrete"]
    assert env.action_spaces["multi"] is inner.action_spaces["multi"]
    assert str(env) == "<GroupAgentsWrapper<HeterogeneousSpacesEnv>>"
    with pytest.raises(UnknownAgentError, match="a member of group 'pair', which replaces it"):
        env.get_action_space("box")


def test_spaces_from_overrides_only() -> None:
    env = ManyAgentsEnv({"num_agents": 8}).with_agent_groups({"deciders": ["decision_maker_0", "decision_maker_4"]})
    assert env.get_observation_space("deciders") == spaces.Tuple([spaces.Discrete(2)] * 2)
    assert env.get_action_space("robot_1") == spaces.Discrete(4)
    assert env.possible_agents[:2] == ["deciders", "robot_1"]


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"a": ["player1"], "b": ["player1", "player2"]}, "agent 'player1' is listed in 'a' and in group 'b'; groups may not overlap"),
        ({"a": ["player1", "player1"]}, "agent 'player1' is listed twice in group 'a'"),
        ({"a": ["player1", "player9"]}, "unknown member 'player9' of group 'a'; the env's agents are ['player1', 'player2']"),
        ({"a": []}, "group 'a' has no members"),
        ({"a": "player1"}, "the members of group 'a' must be a list of agent ids, received the string 'player1'; "
                           "write ['player1'] for a group of one"),
        ({"player2": ["player1"]}, "group id 'player2' is already an agent id"),
        ({"__all__": ["player1"]}, "group id '__all__' is already an agent id"),
    ],
)
def test_bad_groups_are_refused_at_construction(groups: dict, message: str) -> None:
    with pytest.raises(GroupingError, match=re.escape(message)):
        RockPaperScissors().with_agent_groups(groups)


def test_given_spaces_are_validated_and_used() -> None:
    tuple_space = spaces.Tuple([spaces.Discrete(3), spaces.Discrete(3)])
    env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]}, act_space=tuple_space)
    assert env.get_action_space("team") is tuple_space
    with pytest.raises(SpaceError, match=r"observation space of group 'team' must be a Tuple of 2 spaces .* received Discrete"):
        RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]}, obs_space=spaces.Discrete(3))
    with pytest.raises(SpaceError, match=r"action space of group 'team' must be a Tuple of 2 spaces .* received a Tuple of 1"):
        RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]}, act_space=spaces.Tuple([spaces.Discrete(3)]))
    per_group = {"one": spaces.Tuple([spaces.Discrete(3)])}
    env = RockPaperScissors().with_agent_groups({"one": ["player1"], "two": ["player2"]}, obs_space=per_group)
    assert env.get_observation_space("one") is per_group["one"]
    assert env.get_observation_space("two") == spaces.Tuple([spaces.Discrete(3)])
    # A misspelled group id would leave its group with the default space: refused by name.
    with pytest.raises(GroupingError, match=re.escape("action spaces given for ['tow'], which are not groups; "
                                                      "the groups are ['one', 'two']")):
        RockPaperScissors().with_agent_groups({"one": ["player1"], "two": ["player2"]}, act_space={"tow": per_group["one"]})


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (spaces.Box(1.0, 2.0, (2,), np.float32), np.ones(2, np.float32)),
        (spaces.Box(-3, 3, (2, 2), np.int16), np.zeros((2, 2), np.int16)),
        (spaces.Discrete(3, start=5), np.int64(5)),
        (spaces.MultiDiscrete([2, 3], start=[1, -1]), np.array([1, -1])),
        (spaces.MultiBinary(3), np.zeros(3, np.int8)),
        (spaces.Text(5), "0"),
        (spaces.Text(5, min_length=0), ""),
        (spaces.Text(5, min_length=2, charset="xyz"), "xx"),
        (spaces.Dict({"o": spaces.Discrete(2), "t": spaces.Tuple([spaces.Discrete(4, start=1)])}), {"o": np.int64(0), "t": (np.int64(1),)}),
    ],
)
def test_placeholder_observations_of_members_not_seen_yet_are_in_their_space(space: spaces.Space, expected: Any) -> None:
    env = _OneSpaceEnv(space).with_agent_groups({"team": ["late", "early"]})
    obs, _ = env.reset(seed=0)
    placeholder = obs["team"][0]
    assert space.contains(placeholder)
    assert repr(placeholder) == repr(expected)  # values and dtypes
    assert env.get_observation_space("team").contains(obs["team"])


def test_members_without_a_placeholder_observation_are_refused_at_construction() -> None:
    graph = spaces.Graph(node_space=spaces.Discrete(2), edge_space=None)
    with pytest.raises(SpaceError, match=r"^cannot group agent 'late' into group 'team': a member not seen yet holds "
                                         r"a placeholder observation, and its observation space Graph\(.*\) has no "
                                         r"placeholder observation \(Box, Discrete, "):
        _OneSpaceEnv(graph).with_agent_groups({"team": ["late", "early"]})


class _OneSpaceEnv(MultiAgentEnv):
    """``early`` acts from the start with a Discrete observation; ``late`` never joins."""

    def __init__(self, late_space: spaces.Space) -> None:
        super().__init__()
        self.possible_agents = ["late", "early"]
        self.agents = []
        self.observation_spaces = {"late": late_space, "early": spaces.Discrete(2)}
        self.action_spaces = {"late": spaces.Discrete(2), "early": spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.agents = ["early"]
        return {"early": 0}, {}

    def step(self, action_dict):
        return {"early": 1}, {"early": 1.0}, {"early": True, ALL: True}, {ALL: False}, {}


# Simultaneous moves, rewards, infos ---------------------------------------------------------


def test_simultaneous_group_sums_rewards_and_reports_individual_ones() -> None:
    env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})
    obs, infos = env.reset(seed=0)
    assert obs == {"team": (0, 0)} and env.agents == ["team"]
    assert infos == {"team": {"individual_rewards": {"player1": 0.0, "player2": 0.0}, "member_infos": {},
                              "_group_rewards": [0.0, 0.0], "_group_info": [{}, {}]}}
    obs, rewards, terminateds, truncateds, infos = env.step({"team": (2, 1)})
    assert obs == {"team": (1, 2)}
    assert rewards == {"team": 0.0}
    assert infos["team"]["individual_rewards"] == {"player1": 1.0, "player2": -1.0}
    assert infos["team"]["_group_rewards"] == [1.0, -1.0]  # RLlib's key, in member order
    assert terminateds == {"team": False, ALL: False} and truncateds == {"team": False, ALL: False}
    for _ in range(9):
        obs, rewards, terminateds, truncateds, infos = env.step({"team": [0, 0]})
    assert terminateds == {"team": True, ALL: True} and truncateds[ALL] is False
    assert obs == {"team": (0, 0)} and env.agents == []
    with pytest.raises(ResetNeededError):
        env.step({"team": (0, 0)})


def test_passthrough_agents_are_unchanged_and_group_returns_are_member_sums() -> None:
    grouped = HeterogeneousSpacesEnv().with_agent_groups({"pair": ["box", "discrete"]})
    plain = HeterogeneousSpacesEnv()
    grouped_result = rollout(grouped, seed=4)
    # Replay the same actions on the plain env.
    plain_obs, _ = plain.reset(seed=4)
    member_returns: dict[str, float] = {}
    for transition in play(grouped, seed=4):
        if transition.actions is None:
            continue
        actions = {a: v for a, v in transition.actions.items() if a != "pair"}
        actions["box"], actions["discrete"] = transition.actions["pair"]
        plain_obs, rewards, _, _, _ = plain.step(actions)
        for agent_id, reward in rewards.items():
            member_returns[agent_id] = member_returns.get(agent_id, 0.0) + reward
        assert transition.obs["masked"] is not None
        np.testing.assert_array_equal(transition.obs["masked"]["action_mask"], plain_obs["masked"]["action_mask"])
        np.testing.assert_array_equal(transition.obs["pair"][0], plain_obs["box"])
        assert transition.obs["pair"][1] == plain_obs["discrete"]
        assert transition.rewards["multi"] == rewards["multi"]
    assert grouped_result.returns["pair"] == pytest.approx(member_returns["box"] + member_returns["discrete"])
    assert grouped_result.returns["multi"] == pytest.approx(member_returns["multi"])


def test_rewards_for_one_member_only_and_between_the_groups_turns() -> None:
    # agent_2 is paid 0.5 as a bystander while it does not act; its group carries the reward.
    env = IrregularOrderEnv().with_agent_groups({"solo": ["agent_2"]})
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"agent_1", "agent_3"}
    obs, rewards, terminateds, _, infos = env.step({"agent_1": 1, "agent_3": 0})
    assert rewards == {"agent_1": 1.0, "agent_3": 0.0, "solo": 0.5}
    assert set(obs) == {"agent_1", "solo"}
    assert terminateds.get("solo", False) is False
    assert infos["solo"]["individual_rewards"] == {"agent_2": 0.5}
    obs, rewards, _, _, infos = env.step({"agent_1": 0, "solo": (1,)})
    assert rewards == {"agent_1": 0.0, "solo": 1.0, "agent_3": 0.5}
    assert set(obs) == {"solo", "agent_3"}
    assert infos["solo"]["individual_rewards"] == {"agent_2": 1.0}
    obs, rewards, _, _, infos = env.step({"solo": (1,), "agent_3": 1})
    assert rewards == {"solo": 1.0, "agent_3": 1.0, "agent_1": 0.5}
    assert "solo" not in obs and "solo" not in infos


class PaysBoth(MultiAgentEnv):
    """Turn-based: p0 and p1 alternate for four moves, and every move pays both one point."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = ["p0", "p1"]
        self.observation_spaces = {a: spaces.Discrete(10) for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(2) for a in self.possible_agents}
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["p0", "p1"]
        return {"p0": 0}, {}

    def step(self, action_dict):
        self.t += 1
        mover = "p1" if self.t % 2 else "p0"
        done = self.t >= 4
        if done:
            self.agents = []
        return {mover: self.t}, {"p0": 1.0, "p1": 1.0}, {ALL: done}, {ALL: False}, {}


def test_individual_rewards_paid_after_a_groups_last_turn_arrive_at_the_end() -> None:
    env = PaysBoth().with_agent_groups({"A": ["p0"], "B": ["p1"]})
    obs, _ = env.reset(seed=0)
    returns = {"A": 0.0, "B": 0.0}
    individual = {"p0": 0.0, "p1": 0.0}
    done = False
    while not done:
        (group,) = [g for g in obs if g in env.agents]
        obs, rewards, terminateds, _, infos = env.step({group: (0,)})
        for agent_id, reward in rewards.items():
            returns[agent_id] += reward
        for info in infos.values():
            for member, reward in info.get("individual_rewards", {}).items():
                individual[member] += reward
        done = terminateds[ALL]
    # B was paid in the last step without being asked to act: it gets a final entry to carry that.
    assert set(obs) == {"A", "B"} and terminateds["B"] is True
    assert infos["B"]["individual_rewards"] == {"p1": 1.0}
    assert returns == {"A": 4.0, "B": 4.0} and individual == {"p0": 4.0, "p1": 4.0}


class _ThreeActTogether(MultiAgentEnv):
    """``a``, ``b`` and ``c`` observe 0 at reset and act together; subclasses say what follows."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["a", "b", "c"]
        self.observation_spaces = {agent_id: spaces.Discrete(10) for agent_id in self.possible_agents}
        self.action_spaces = {agent_id: spaces.Discrete(2) for agent_id in self.possible_agents}
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, list(self.possible_agents)
        return dict.fromkeys(self.agents, 0), {}


class EndsWhilePartnerWaits(_ThreeActTogether):
    """``a``, ``b`` and ``c`` act; then ``a`` ends (final observation 1, paid ``final_reward``)
    while ``b`` waits, and in the next step the episode ends with ``b`` still waiting."""

    def __init__(self, final_reward: float) -> None:
        super().__init__()
        self.final_reward = final_reward

    def step(self, action_dict):
        self.t += 1
        if self.t == 1:
            self.agents = ["b", "c"]
            return ({"a": 1, "c": 1}, {"a": self.final_reward, "c": 1.0},
                    {"a": True, ALL: False}, {ALL: False}, {})
        self.agents = []
        return {"c": 2}, {"c": 1.0}, {"c": True, ALL: True}, {ALL: False}, {}


@pytest.mark.parametrize("final_reward", [0.0, 0.5])
def test_a_members_final_observation_arrives_whatever_its_last_reward(final_reward: float) -> None:
    # A member paid exactly 0 was paid: its final observation must not depend on the value.
    env = EndsWhilePartnerWaits(final_reward).with_agent_groups({"team": ["a", "b"]})
    env.reset(seed=0)
    obs, rewards, _, _, _ = env.step({"team": (0, 0), "c": 0})
    assert set(obs) == {"c"} and rewards["team"] == final_reward
    obs, _, terminateds, truncateds, infos = env.step({"c": 0})
    assert obs == {"c": 2, "team": (1, 0)}
    assert terminateds["team"] is True and truncateds["team"] is False and terminateds[ALL] is True
    assert infos["team"]["individual_rewards"] == {"a": final_reward, "b": 0.0}


class MembersEndByFlagsOnly(_ThreeActTogether):
    """``a``, ``b`` and ``c`` act together; ``a`` and ``b`` then end by flags alone (no final
    observation), paid 1 and 2, while ``c`` goes on for one more step. With ``apart``, ``b`` ends
    first (with its final observation 5) and ``a`` ends alone in the next step."""

    def __init__(self, apart: bool) -> None:
        super().__init__()
        self.apart = apart

    def step(self, action_dict):
        self.t += 1
        if self.apart and self.t == 1:
            self.agents = ["a", "c"]
            return {"a": 1, "b": 5, "c": 1}, {"b": 2.0}, {"b": True, ALL: False}, {ALL: False}, {"a": {"t": 1}}
        if self.t < 3 and "a" in self.agents:
            self.agents = ["c"]
            rewards = {"a": 1.0, "c": 0.0} if self.apart else {"a": 1.0, "b": 2.0, "c": 0.0}
            ended = {"a": True} if self.apart else {"a": True, "b": True}
            return {"c": 1}, rewards, {**ended, ALL: False}, {ALL: False}, {}
        self.agents = []
        return {"c": 2}, {"c": 1.0}, {"c": True, ALL: True}, {ALL: False}, {}


@pytest.mark.parametrize("apart", [False, True])
def test_a_group_whose_last_members_end_by_flags_alone_gets_its_final_entry(apart: bool) -> None:
    # Its members' rewards and latest observations must not wait for "__all__": the group is over.
    env = MembersEndByFlagsOnly(apart).with_agent_groups({"team": ["a", "b"]})
    env.reset(seed=0)
    obs, rewards, terminateds, _, infos = env.step({"team": (0, 0), "c": 0})
    if apart:
        assert obs["team"][1] == 5 and rewards["team"] == 2.0 and terminateds["team"] is False
        obs, rewards, terminateds, _, infos = env.step({"team": (0, 0), "c": 0})
    assert obs == {"c": 1, "team": (1, 5) if apart else (0, 0)}
    assert rewards["team"] == (1.0 if apart else 3.0)
    assert terminateds["team"] is True and terminateds[ALL] is False and env.agents == ["c"]
    individual = {"a": 1.0, "b": 0.0} if apart else {"a": 1.0, "b": 2.0}
    assert infos["team"] == {"individual_rewards": individual, "member_infos": {},
                             "_group_rewards": list(individual.values()), "_group_info": [{}, {}]}
    obs, _, terminateds, _, infos = env.step({"c": 0})
    assert obs == {"c": 2} and "team" not in terminateds and "team" not in infos


class MaskedMembersEndApart(MultiAgentEnv):
    """Simultaneous and masked; ``x`` ends after one step with a mask that allows nothing, ``y`` after three."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        self.possible_agents = ["x", "y"]
        self.observation_spaces = {a: masked_space(spaces.Discrete(5), 3) for a in self.possible_agents}
        self.action_spaces = {a: spaces.Discrete(3) for a in self.possible_agents}
        self.t = 0

    def observe(self, legal: list[int]) -> dict:
        return {"observation": self.t, "action_mask": mask_from_legal(legal, 3)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.agents = 0, ["x", "y"]
        return {a: self.observe([0, 1, 2]) for a in self.agents}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        self.t += 1
        obs, terminateds = {}, {}
        for agent_id in self.agents:
            ends = self.t == (1 if agent_id == "x" else 3)
            obs[agent_id] = self.observe([] if ends else [0, 1, 2])
            terminateds[agent_id] = ends
        self.agents = [a for a in self.agents if not terminateds[a]]
        terminateds[ALL] = not self.agents
        return obs, dict.fromkeys(obs, 1.0), terminateds, {ALL: False}, {}


def test_random_actions_for_a_group_skip_the_masks_of_members_that_ended() -> None:
    def grouped() -> MultiAgentEnv:
        return MaskedMembersEndApart().with_agent_groups({"team": ["x", "y"]})

    assert check_env(MaskedMembersEndApart).ok
    report = check_env(grouped)
    assert report.ok, str(report)
    assert rollout(grouped(), seed=0).returns == {"team": 4.0}


def test_individual_rewards_cover_members_without_reward() -> None:
    env = JoinLeaveEnv().with_agent_groups({"team": ["scout", "runner"]})
    env.reset(seed=0)
    _, rewards, _, _, infos = env.step({"team": (2, 0)})
    assert infos["team"]["individual_rewards"]["runner"] == 0.0
    assert rewards["team"] == pytest.approx(infos["team"]["individual_rewards"]["scout"])


# Members joining late and ending early ------------------------------------------------------


def test_members_that_join_late_and_end_early() -> None:
    env = JoinLeaveEnv().with_agent_groups({"team": ["scout", "runner"]})
    obs, infos = env.reset(seed=1)
    scout_start = obs["team"][0].copy()
    # The runner has not joined: its slot holds the zero of its space, its action is not sent.
    np.testing.assert_array_equal(obs["team"][1], np.zeros(1, np.float32))
    assert infos["team"]["member_infos"] == {"scout": {"joined": 0}}
    # Its slot takes any value of its space, ignored; one outside it is refused (as the vector
    # env and the PettingZoo exports refuse it: the action is a value of the Tuple space).
    with pytest.raises(InvalidActionError, match=r"member 'runner', at \[1\]: a NoneType.*; 'runner' is not asked to act "
                                                 r"now, so its slot is ignored, but it must still hold a value of its space"):
        env.step({"team": (2, None)})
    obs, *_ = env.step({"team": (2, 0)})
    np.testing.assert_array_equal(obs["team"][0], scout_start + 1)
    obs, _, _, _, infos = env.step({"team": (1, 0)})  # step 2: the runner joins
    assert infos["team"]["member_infos"] == {"runner": {"joined": 2}}
    assert infos["team"]["_group_info"] == [{}, {"joined": 2}]  # RLlib's key: member order, {} if none
    obs, *_ = env.step({"team": (1, 2)})
    assert set(obs) == {"team", "keeper"} and env.agents == ["team", "keeper"]
    obs, _, terminateds, truncateds, _ = env.step({"team": (0, 2), "keeper": 1})  # step 4: scout ends
    scout_final = obs["team"][0].copy()
    np.testing.assert_array_equal(scout_final, scout_start)
    assert terminateds["team"] is False and truncateds["team"] is False
    # The scout's slot keeps its final observation and the value in its action slot is ignored.
    obs, *_ = env.step({"team": (1, 2), "keeper": 1})
    np.testing.assert_array_equal(obs["team"][0], scout_final)
    np.testing.assert_array_equal(obs["team"][1], np.array([3.0], np.float32))  # 0 at step 2, then +1 x 3
    obs, rewards, terminateds, truncateds, _ = env.step({"team": (2, 1), "keeper": 1})  # step 6: runner truncated
    assert "team" in obs and truncateds["team"] is True and terminateds["team"] is False
    assert env.agents == ["keeper"]
    with pytest.raises(UnexpectedActionError, match="'team'"):
        env.step({"team": (0, 0), "keeper": 1})
    obs, rewards, terminateds, truncateds, _ = env.step({"keeper": 1})
    assert "team" not in obs and "team" not in rewards and "team" not in terminateds
    obs, rewards, terminateds, truncateds, _ = env.step({"keeper": 1})
    assert terminateds[ALL] is True and "team" not in terminateds


def test_group_returns_equal_member_returns_with_late_and_early_members() -> None:
    grouped = rollout(JoinLeaveEnv().with_agent_groups({"team": ["scout", "runner"]}), seed=3)
    plain_env = JoinLeaveEnv()
    plain: dict[str, float] = {}
    for transition in play(JoinLeaveEnv().with_agent_groups({"team": ["scout", "runner"]}), seed=3):
        if transition.index == 0:
            plain_env.reset(seed=3)
            acting = ["scout"]
            continue
        actions = dict(transition.actions)
        team = actions.pop("team", None)
        if team is not None:
            for member, action in zip(["scout", "runner"], team, strict=True):
                if member in acting:
                    actions[member] = action
        obs, rewards, terminateds, truncateds, _ = plain_env.step(actions)
        acting = [a for a in obs if not (terminateds.get(a) or truncateds.get(a))]
        for agent_id, reward in rewards.items():
            plain[agent_id] = plain.get(agent_id, 0.0) + reward
    assert grouped.returns["team"] == pytest.approx(plain["scout"] + plain["runner"])
    assert grouped.returns["keeper"] == pytest.approx(plain["keeper"])


# Acting apart -------------------------------------------------------------------------------


def test_turn_based_group_raises_naming_group_and_members() -> None:
    env = TicTacToe().with_agent_groups({"both": ["player1", "player2"]})
    with pytest.raises(GroupingError, match=r"members of group 'both' must act together, but the env asked \['player(1|2)'\] to act and not \['player(1|2)'\]"):
        env.reset(seed=0)
    assert env.agents == []
    with pytest.raises(ResetNeededError, match=r"needs reset\(\): reset\(\) raised GroupingError"):
        env.step({"both": (0, 0)})


def test_group_split_by_an_irregular_order_raises_at_the_step() -> None:
    env = IrregularOrderEnv().with_agent_groups({"pair": ["agent_1", "agent_3"]})
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["pair"]
    with pytest.raises(GroupingError, match=re.escape("group 'pair' must act together, but the env asked ['agent_1'] to act and not ['agent_3']")):
        env.step({"pair": (1, 1)})
    assert env.agents == []  # nothing can step: the env moved on without the group
    with pytest.raises(ResetNeededError, match=r"the last step\(\) raised GroupingError"):
        env.step({"agent_2": 0})
    assert list(env.reset(seed=1)[0]) == ["pair"]


# Bad actions --------------------------------------------------------------------------------


def test_bad_action_dicts_raise_before_the_env_steps() -> None:
    env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})
    env.reset(seed=0)
    with pytest.raises(MissingActionError, match=r"no action for \['team'\]"):
        env.step({})
    with pytest.raises(UnexpectedActionError, match="'player1'"):
        env.step({"player1": 0})
    with pytest.raises(InvalidActionError, match=r"agent 'team': expected a tuple of 2 actions, one per member of \['player1', 'player2'\], received 1"):
        env.step({"team": 1})
    with pytest.raises(InvalidActionError, match="received \\(1,\\)"):
        env.step({"team": (1,)})
    assert env.env.num_moves == 0



def test_a_groups_action_is_checked_slot_by_slot_before_the_env_steps() -> None:
    env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})
    env.reset(seed=0)
    for action, reason in [
        ((5, 1), r"member 'player1', at \[0\]: 5 is outside Discrete\(3\)"),
        ((0, 1.7), r"member 'player2', at \[1\]: a float \(1.7\) where the space needs an integer"),
        (np.array([0.0, 1.0]), r"member 'player1', at \[0\]: a float64"),
    ]:
        with pytest.raises(InvalidActionError, match=rf"agent 'team': expected an action in Tuple.*{reason}"):
            env.step({"team": action})
    assert env.env.num_moves == 0  # the env has not stepped
    assert env.step({"team": [1, 2]})[0]["team"] == (2, 1)


def test_group_ids_are_strings() -> None:
    with pytest.raises(GroupingError, match=r"group id 0 is not a string \(int\); agent ids are strings"):
        RockPaperScissors().with_agent_groups({0: ["player1", "player2"]})


def test_a_groups_action_may_be_an_array_with_one_row_per_member() -> None:
    # gymnasium's Tuple takes an array's rows as its slots; the grouped env and its vector do too.
    env = RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})
    env.reset(seed=0)
    _, rewards, *_ = env.step({"team": np.array([1, 0])})  # paper beats rock
    assert env.env.num_moves == 1 and rewards["team"] == 0.0
    with pytest.raises(InvalidActionError, match=r"agent 'team': expected a tuple of 2 actions.*received array\(\[1\]\)"):
        env.step({"team": np.array([1])})
    with VectorMultiAgentEnv([lambda: RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]})], "sync") as venv:
        venv.reset(seed=0)
        (obs,), (rewards,) = venv.step([{"team": np.array([2, 1], np.int8)}])[:2]
        assert set(obs) == {"team"} and rewards["team"] == 0.0
        with pytest.raises(VectorEnvError, match=r"env 0: invalid action for agent 'team'.*at \[0\]: 3 is outside"):
            venv.step([{"team": np.array([3, 1])}])

# Conformance --------------------------------------------------------------------------------


GROUPED_ENVS = {
    "simultaneous": lambda: RockPaperScissors().with_agent_groups({"team": ["player1", "player2"]}),
    "join_leave": lambda: JoinLeaveEnv().with_agent_groups({"team": ["scout", "runner"]}),
    "bystander": lambda: IrregularOrderEnv().with_agent_groups({"solo": ["agent_2"]}),
    "heterogeneous": lambda: HeterogeneousSpacesEnv().with_agent_groups({"pair": ["box", "discrete"], "one": ["multi"]}),
    "overrides": lambda: ManyAgentsEnv({"num_agents": 12}).with_agent_groups(
        {"robots": ["robot_1", "robot_2", "robot_3"], "deciders": ["decision_maker_0", "decision_maker_4"]}
    ),
}


@pytest.mark.parametrize("name", sorted(GROUPED_ENVS))
def test_grouped_envs_pass_check_env(name: str) -> None:
    report = check_env(GROUPED_ENVS[name])
    assert report.ok, report.findings
    assert report.findings == ()


def test_check_env_sees_a_group_split_by_turns() -> None:
    report = check_env(lambda: IrregularOrderEnv().with_agent_groups({"pair": ["agent_1", "agent_3"]}))
    assert not report.ok
    assert any("group 'pair' must act together" in finding.message for finding in report.findings)


# Integration --------------------------------------------------------------------------------


def test_grouped_envs_vectorize_and_batch_as_tuples() -> None:
    def factory() -> MultiAgentEnv:
        return HeterogeneousSpacesEnv().with_agent_groups({"pair": ["box", "discrete"]})

    with VectorMultiAgentEnv([factory] * 2, "async") as venv:
        obs_list, _ = venv.reset(seed=0)
        batches = gather(obs_list, lambda i, agent_id: agent_id)
        pair = batches["pair"].obs
        assert isinstance(pair, tuple) and pair[0].shape == (2, 3) and pair[1].tolist() == [0, 0]
        policy = RandomPolicy(factory(), seed=0)
        actions = {
            agent_id: [policy(agent_id, obs_list[i][agent_id]) for i, _ in batch.keys]
            for agent_id, batch in batches.items()
        }
        rewards_list = venv.step(scatter(actions, batches, 2))[1]
        assert all("pair" in rewards for rewards in rewards_list)


def test_vectorized_grouped_env_takes_the_actions_the_grouped_env_takes() -> None:
    # The grouped env takes a list for a group's Tuple action; the vector's checks must too.
    def factory() -> MultiAgentEnv:
        return HeterogeneousSpacesEnv().with_agent_groups({"pair": ["box", "discrete"]})

    policy = RandomPolicy(factory(), seed=0)
    box_action = np.zeros(2, np.float32)
    with VectorMultiAgentEnv([factory], "sync") as venv:
        (obs,), _ = venv.reset(seed=0)
        actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
        (obs,), (rewards,) = venv.step([{**actions, "pair": [box_action, 1]}])[:2]
        assert rewards["pair"] == 1.0  # box: -0.0, discrete: 1 == t % 3 at t = 1
        actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
        (obs,) = venv.step([{**actions, "pair": (box_action, 2)}])[0]
        actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
        with pytest.raises(VectorEnvError, match=r"env 0: invalid action for agent 'pair'.*at \[1\]: 7 is outside"):
            venv.step([{**actions, "pair": [box_action, 7]}])
        with pytest.raises(VectorEnvError, match=r"a list of 1 where the space needs a tuple of 2"):
            venv.step([{**actions, "pair": [box_action]}])
        assert venv.step([{**actions, "pair": [box_action, 0]}])[1][0]["pair"] == 1.0  # nothing had stepped


def _pistonball(max_cycles: int = 20) -> MultiAgentEnv:
    from pettingzoo.butterfly.pistonball import pistonball

    from bridges.pettingzoo import ParallelPettingZooEnv

    return ParallelPettingZooEnv(pistonball.parallel_env(max_cycles=max_cycles))


def test_pistonball_as_two_teams_returns_are_member_sums() -> None:
    pistons = [f"piston_{i}" for i in range(20)]
    teams = {"left": pistons[:10], "right": pistons[10:]}
    grouped = _pistonball().with_agent_groups(teams)
    assert grouped.possible_agents == ["left", "right"]
    plain = _pistonball()
    plain.reset(seed=2)
    member_returns = dict.fromkeys(pistons, 0.0)
    team_returns = {"left": 0.0, "right": 0.0}
    for transition in play(grouped, seed=2):
        for team, reward in transition.rewards.items():
            team_returns[team] += reward
        if transition.actions is None:
            continue
        actions: dict[str, Any] = {}
        for team, members in teams.items():
            actions.update(zip(members, transition.actions[team], strict=True))
        obs, rewards, _, _, _ = plain.step(actions)
        for agent_id, reward in rewards.items():
            member_returns[agent_id] += reward
        for team, members in teams.items():
            for slot, member in enumerate(members):
                np.testing.assert_array_equal(transition.obs[team][slot], obs[member])
    assert transition.terminateds[ALL] or transition.truncateds[ALL]
    for team, members in teams.items():
        assert team_returns[team] == pytest.approx(sum(member_returns[m] for m in members))
    assert team_returns["left"] != 0.0


def test_pistonball_teams_pass_check_env() -> None:
    pistons = [f"piston_{i}" for i in range(20)]
    report = check_env(
        lambda: _pistonball(max_cycles=8).with_agent_groups({"left": pistons[:10], "right": pistons[10:]}), episodes=1
    )
    assert report.ok, report.findings


def test_masked_members_get_legal_random_actions_from_the_checker_and_rollout() -> None:
    from marl_core import rollout
    from marl_core.conformance import check_env
    from tests.fixtures.envs import HeterogeneousSpacesEnv

    def grouped() -> GroupAgentsWrapper:
        return GroupAgentsWrapper(HeterogeneousSpacesEnv(), {"team": ["masked", "discrete"]})

    for seed in range(10):  # the inner env raises on any masked-out action
        rollout(grouped(), seed=seed)
    report = check_env(grouped, seed=0)
    assert report.ok, str(report)


def test_a_member_asked_to_act_with_a_mask_that_allows_nothing_is_an_env_error() -> None:
    # In a slot, an all-zero mask means "this member does not act": an asked member with one was
    # taken for not acting, and the trainer sent it a masked action.
    from tests.fixtures.envs import HeterogeneousSpacesEnv

    class Stuck(HeterogeneousSpacesEnv):
        def step(self, action_dict):
            obs, *rest = super().step(action_dict)
            if "masked" in obs:
                obs["masked"] = {**obs["masked"], "action_mask": np.zeros_like(obs["masked"]["action_mask"])}
            return (obs, *rest)

    env = GroupAgentsWrapper(Stuck(), {"team": ["masked", "discrete"]})
    obs, _ = env.reset(seed=0)
    policy = RandomPolicy(env, seed=0)
    actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
    with pytest.raises(EnvContractError, match=r"asks member 'masked' of group 'team' to act with an action mask "
                                               r"that allows no action"):
        env.step(actions)
    # The inner env has stepped and its result could not be grouped: nobody is live, and the
    # next step says why it needs a reset (not "before reset() or after the episode ended").
    assert env.agents == []
    with pytest.raises(ResetNeededError, match=r"needs reset\(\): the last step\(\) raised EnvContractError"):
        env.step(actions)


def test_a_member_reward_that_is_not_a_number_needs_a_reset_too() -> None:
    from tests.fixtures.envs import HeterogeneousSpacesEnv

    class PaysNone(HeterogeneousSpacesEnv):
        def step(self, action_dict):
            obs, rewards, *rest = super().step(action_dict)
            return (obs, dict.fromkeys(rewards), *rest)

    env = GroupAgentsWrapper(PaysNone(), {"team": ["masked", "discrete"]})
    obs, _ = env.reset(seed=0)
    policy = RandomPolicy(env, seed=0)
    actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
    with pytest.raises(EnvContractError, match=r"a reward that is not one number: None"):
        env.step(actions)  # a bare TypeError from float(None), after which step() went on
    assert env.agents == []
    with pytest.raises(ResetNeededError, match=r"the last step\(\) raised EnvContractError"):
        env.step(actions)
    env.reset(seed=0)
    assert "team" in env.agents


def test_any_error_after_the_env_stepped_or_in_its_reset_needs_a_reset() -> None:
    from tests.fixtures.envs import HeterogeneousSpacesEnv

    class InfosNone(HeterogeneousSpacesEnv):  # a TypeError in the wrapper, after the env stepped
        def step(self, action_dict):
            return (*super().step(action_dict)[:4], None)

    env = GroupAgentsWrapper(InfosNone(), {"team": ["masked", "discrete"]})
    obs, _ = env.reset(seed=0)
    policy = RandomPolicy(env, seed=0)
    actions = {agent_id: policy(agent_id, observation) for agent_id, observation in obs.items()}
    with pytest.raises(TypeError):
        env.step(actions)
    assert env.agents == []  # the next step stepped the env again
    with pytest.raises(ResetNeededError, match=r"the last step\(\) raised TypeError"):
        env.step(actions)

    class ResetFails(HeterogeneousSpacesEnv):
        fail = False

        def reset(self, *, seed=None, options=None):
            if self.fail:
                raise RuntimeError("no map file")
            return super().reset(seed=seed, options=options)

    env = GroupAgentsWrapper(ResetFails(), {"team": ["masked", "discrete"]})
    obs, _ = env.reset(seed=0)
    env.env.fail = True
    with pytest.raises(RuntimeError):
        env.reset(seed=1)
    assert env.agents == []  # the old episode's agents, and a step into an env whose reset failed
    with pytest.raises(ResetNeededError, match=r"the env's reset\(\) raised RuntimeError"):
        env.step(actions)


def test_vector_refuses_a_masked_member_action_before_any_env_steps() -> None:
    def grouped() -> GroupAgentsWrapper:
        return GroupAgentsWrapper(HeterogeneousSpacesEnv(), {"team": ["masked", "discrete"]})

    policy = RandomPolicy(grouped(), seed=0)
    with VectorMultiAgentEnv([grouped, grouped], "sync") as venv:
        obs_list, _ = venv.reset(seed=0)
        actions = [{a: policy(a, o) for a, o in obs.items()} for obs in obs_list]
        mask = obs_list[1]["team"][0]["action_mask"]
        illegal = int(np.flatnonzero(mask == 0)[0])
        bad = {**actions[1], "team": (illegal, actions[1]["team"][1])}
        with pytest.raises(VectorEnvError, match=rf"env 1: illegal action for agent 'team': received {illegal}, .*in slot \[0\] of"):
            venv.step([actions[0], bad])
        assert [inner.t for inner in venv.call("env")] == [0, 0]  # nothing stepped, in either env
        venv.step(actions)
        assert [inner.t for inner in venv.call("env")] == [1, 1]


def test_a_masked_member_action_is_refused_naming_the_group_before_the_env_steps() -> None:
    # It reached the env, which named the member (unknown to the caller) or, checking nothing, took it;
    # the group's refusal names the member too (it named only the slot).
    grouped = GroupAgentsWrapper(HeterogeneousSpacesEnv(), {"team": ["masked", "discrete"]})
    obs, _ = grouped.reset(seed=0)
    mask = obs["team"][0]["action_mask"]
    actions = {a: grouped.get_action_space(a).sample() for a in obs if a != "team"}
    illegal, legal = int(np.flatnonzero(mask == 0)[0]), int(np.flatnonzero(mask)[0])
    with pytest.raises(IllegalActionError, match=rf"agent 'team': received {illegal}, .*in slot \[0\] \(member 'masked'\) of \({illegal}, 0\)"):
        grouped.step({**actions, "team": (illegal, 0)})
    assert grouped.env.t == 0
    grouped.step({**actions, "team": (legal, 0)})
    assert grouped.env.t == 1


class _MemberCutShortThenAllEnds(MultiAgentEnv):
    """``b`` is truncated at step 1, ``a`` plays on; step 2 ends the episode, with or without ``a``'s own flag."""

    def __init__(self, repeat_flags: bool) -> None:
        super().__init__()
        self.repeat_flags = repeat_flags
        self.possible_agents = ["a", "b"]
        self.observation_spaces = {x: spaces.Box(0, 10, (1,), np.float32) for x in self.possible_agents}
        self.action_spaces = {x: spaces.Discrete(2) for x in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.t, self.agents = 0, ["a", "b"]
        return {x: np.zeros(1, np.float32) for x in self.agents}, {}

    def step(self, action_dict: dict) -> tuple:
        self.t += 1
        obs = {x: np.full(1, self.t, np.float32) for x in self.agents}
        if self.t == 1:
            self.agents = ["a"]
            return obs, {"a": 0.0, "b": 0.0}, {ALL: False}, {"b": True, ALL: False}, {}
        self.agents = []
        return obs, {"a": 1.0}, {"a": True, ALL: True} if self.repeat_flags else {ALL: True}, {ALL: False}, {}


@pytest.mark.parametrize("repeat_flags", [True, False])
def test_a_group_with_a_truncated_member_ends_truncated_however_the_end_is_flagged(repeat_flags: bool) -> None:
    # "__all__" alone ended the group terminated, the same episode with a's flag repeated truncated.
    env = _MemberCutShortThenAllEnds(repeat_flags).with_agent_groups({"g": ["a", "b"]})
    env.reset(seed=0)
    env.step({"g": (0, 0)})
    _, _, terminateds, truncateds, _ = env.step({"g": (0, 0)})
    assert (terminateds["g"], truncateds["g"], terminateds[ALL]) == (False, True, True)


@pytest.mark.parametrize("api", ["aec", "parallel"])
def test_exported_grouped_env_refuses_a_masked_member_action(api: str) -> None:
    from bridges.pettingzoo import to_aec, to_parallel

    grouped = GroupAgentsWrapper(HeterogeneousSpacesEnv(), {"team": ["masked", "discrete"]})
    if api == "aec":
        env = to_aec(grouped)
        env.reset(seed=0)
        while env.agent_selection != "team":
            env.step(env.action_space(env.agent_selection).sample())
        mask = env.observe("team")[0]["action_mask"]
        with pytest.raises(IllegalActionError, match=r"agent 'team'.*in slot \[0\] of"):
            env.step((int(np.flatnonzero(mask == 0)[0]), 0))
        env.step((int(np.flatnonzero(mask)[0]), 0))  # the same agent acts again, legally
    else:
        penv = to_parallel(grouped)
        obs, _ = penv.reset(seed=0)
        actions = {a: penv.action_space(a).sample() for a in penv.agents}
        mask = obs["team"][0]["action_mask"]
        with pytest.raises(IllegalActionError, match=r"agent 'team'.*in slot \[0\] of"):
            penv.step({**actions, "team": (int(np.flatnonzero(mask == 0)[0]), 0)})
        assert grouped.env.t == 0
        penv.step({**actions, "team": (int(np.flatnonzero(mask)[0]), 0)})
        assert grouped.env.t == 1


class _MembersEndEarly(MultiAgentEnv):
    """Masked agents (Discrete(3) each, ``config["agents"]``, default "a" and "b"); those in
    ``config["early"]`` (default "b") end at the first step with a final mask that still allows
    action 0, the others play on for three more steps."""

    def __init__(self, config: dict | None = None) -> None:
        super().__init__()
        config = config or {}
        self.possible_agents = list(config.get("agents", ["a", "b"]))
        self.early = set(config.get("early", ["b"]))
        self.agents = list(self.possible_agents)
        space = masked_space(spaces.Box(0, 1, (2,), np.float32), 3)
        self.observation_spaces = dict.fromkeys(self.possible_agents, space)
        self.action_spaces = {a: spaces.Discrete(3) for a in self.possible_agents}
        self.t = 0

    @staticmethod
    def _observe(legal: list[int]) -> dict:
        return {"observation": np.zeros(2, np.float32), "action_mask": mask_from_legal(legal, 3)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: self._observe([0, 1, 2]) for a in self.agents}, {}

    def step(self, action_dict):
        check_action_dict(self, action_dict, self.agents)
        self.t += 1
        if self.t == 1:
            obs = {a: self._observe([0] if a in self.early else [0, 1, 2]) for a in self.agents}
            ended = {a: a in self.early for a in self.agents}
            self.agents = [a for a in self.agents if a not in self.early]
            return obs, dict.fromkeys(obs, 0.0), {**ended, ALL: False}, {**dict.fromkeys(obs, False), ALL: False}, {}
        done = self.t >= 4
        obs = {a: self._observe([0, 1, 2]) for a in self.agents}
        flags = dict.fromkeys(self.agents, done)
        return obs, dict.fromkeys(obs, 0.0), {**flags, ALL: done}, {**dict.fromkeys(obs, False), ALL: False}, {}


def test_an_ended_members_slot_shows_no_legal_action_so_every_consumer_ignores_it() -> None:
    from bridges.pettingzoo import to_aec, to_parallel

    def grouped() -> GroupAgentsWrapper:
        return GroupAgentsWrapper(_MembersEndEarly(), {"g": ["a", "b"]})

    env = grouped()
    env.reset(seed=0)
    obs = env.step({"g": (0, 0)})[0]
    assert obs["g"][1]["action_mask"].tolist() == [0, 0, 0]  # "b" has ended: no action of its counts
    assert env.env.agents == ["a"]
    env.step({"g": (0, 2)})  # slot 1 is ignored
    with VectorMultiAgentEnv([grouped], "sync") as venv:
        venv.reset(seed=0)
        venv.step([{"g": (0, 0)}])
        venv.step([{"g": (0, 2)}])
    penv = to_parallel(grouped())
    penv.reset(seed=0)
    penv.step({"g": (0, 0)})
    penv.step({"g": (0, 2)})
    aec = to_aec(grouped())
    aec.reset(seed=0)
    aec.step((0, 0))
    aec.step((0, 2))
    assert rollout(grouped(), seed=0).steps == 4
    assert check_env(grouped, seed=0).ok


def test_a_group_of_groups_is_checked_down_to_its_members_masks() -> None:
    def nested() -> GroupAgentsWrapper:
        inner = GroupAgentsWrapper(HeterogeneousSpacesEnv(), {"team": ["masked", "discrete"]})
        return GroupAgentsWrapper(inner, {"outer": ["team", "box"]})

    policy = RandomPolicy(nested(), seed=0)
    with VectorMultiAgentEnv([nested], "sync") as venv:
        (obs,), _ = venv.reset(seed=0)
        actions = {a: policy(a, o) for a, o in obs.items()}
        mask = obs["outer"][0][0]["action_mask"]
        (team_action, box_action) = actions["outer"]
        bad = ((int(np.flatnonzero(mask == 0)[0]), team_action[1]), box_action)
        with pytest.raises(VectorEnvError, match=r"agent 'outer': .* \(in slot \[0\]\[0\] of"):
            venv.step([{**actions, "outer": bad}])
        assert venv.call("env")[0].env.t == 0  # nothing stepped
        venv.step([actions])


def test_an_ended_group_inside_a_group_shows_no_legal_action_either() -> None:
    from bridges.pettingzoo import to_parallel

    def nested() -> GroupAgentsWrapper:
        inner = GroupAgentsWrapper(_MembersEndEarly({"agents": ["a", "b", "c"], "early": ["a", "b"]}), {"pair": ["a", "b"]})
        return GroupAgentsWrapper(inner, {"outer": ["pair", "c"]})

    env = nested()
    env.reset(seed=0)
    obs = env.step({"outer": ((0, 0), 0)})[0]
    assert [slot["action_mask"].tolist() for slot in obs["outer"][0]] == [[0, 0, 0], [0, 0, 0]]
    assert obs["outer"][1]["action_mask"].tolist() == [1, 1, 1]
    with VectorMultiAgentEnv([nested], "sync") as venv:
        venv.reset(seed=0)
        venv.step([{"outer": ((0, 0), 0)}])
        venv.step([{"outer": ((2, 2), 1)}])  # slot 0 is ignored: its members have ended
    penv = to_parallel(nested())
    penv.reset(seed=0)
    penv.step({"outer": ((0, 0), 0)})
    penv.step({"outer": ((2, 2), 1)})
    assert check_env(nested, seed=0).ok
