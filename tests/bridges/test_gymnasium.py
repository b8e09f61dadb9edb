"""The Gymnasium bridge: from_gymnasium / to_gymnasium against real Gymnasium envs."""

from __future__ import annotations

import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from bridges.gymnasium import GymnasiumEnv, SingleAgentEnv, from_gymnasium, to_gymnasium
from marl_core import ALL, MultiAgentEnv, make_multi_agent, rollout
from marl_core.env import scalar_reward
from marl_core.errors import (
    EnvContractError,
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    MultiAgentEnvError,
    ResetNeededError,
    SeedError,
    SpaceError,
    UnexpectedActionError,
    UnsupportedEnvError,
)
from marl_core.spaces import is_masked


def _raw_episode(env_id: str, seed: int, actions: list[Any]) -> tuple[list[Any], list[float]]:
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    observations, rewards = [obs], []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        rewards.append(float(reward))
        if terminated or truncated:
            break
    return observations, rewards


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "FrozenLake-v1"])
def test_from_gymnasium_matches_the_raw_env_step_by_step(env_id: str) -> None:
    env = from_gymnasium(gym.make(env_id), agent_id="solo")
    actions: list[Any] = []
    observations: list[Any] = []
    rewards: list[float] = []
    for transition in _play(env, seed=3):
        if transition[0] is not None:
            actions.append(transition[0]["solo"])
            rewards.append(transition[2]["solo"])
        observations.append(transition[1]["solo"])
    raw_observations, raw_rewards = _raw_episode(env_id, 3, actions)
    assert rewards == raw_rewards
    assert len(observations) == len(raw_observations)
    for ours, raw in zip(observations, raw_observations, strict=True):
        np.testing.assert_array_equal(ours, raw)


def _play(env: MultiAgentEnv, seed: int, limit: int = 300) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(None, obs, None)]
    space = env.get_action_space("solo")
    for _ in range(limit):
        space.seed(int(rng.integers(1 << 30)))
        actions = {"solo": space.sample()}
        obs, rewards, terminateds, truncateds, _ = env.step(actions)
        out.append((actions, obs, rewards))
        assert terminateds[ALL] == terminateds["solo"] and truncateds[ALL] == truncateds["solo"]
        if terminateds[ALL] or truncateds[ALL]:
            break
    return out


def test_seeded_episodes_repeat_and_differ_across_seeds() -> None:
    env = from_gymnasium(gym.make("CartPole-v1"))
    first = rollout(env, seed=7)
    again = rollout(env, seed=7)
    other = rollout(env, seed=8)
    assert first == again
    assert (first.returns, first.steps) != (other.returns, other.steps)


def test_bad_actions_raise_before_the_env_is_stepped() -> None:
    env = from_gymnasium(gym.make("CartPole-v1"))
    env.reset(seed=0)
    state = np.array(env.env.unwrapped.state, copy=True)
    with pytest.raises(UnexpectedActionError, match="'intruder'"):
        env.step({"agent_0": 0, "intruder": 1})
    with pytest.raises(MissingActionError, match="agent_0"):
        env.step({})
    with pytest.raises(InvalidActionError, match=r"agent 'agent_0'.*Discrete\(2\)"):
        env.step({"agent_0": 5})
    np.testing.assert_array_equal(env.env.unwrapped.state, state)
    env.step({"agent_0": 1})  # still usable


def test_step_after_the_end_raises_reset_needed() -> None:
    env = from_gymnasium(gym.make("CartPole-v1"))
    result = rollout(env, seed=0)
    assert result.terminated
    with pytest.raises(ResetNeededError, match="agent_0"):
        env.step({"agent_0": 0})


def test_truncation_sets_all_in_truncateds() -> None:
    env = from_gymnasium(gym.make("Pendulum-v1", max_episode_steps=5))
    result = rollout(env, seed=0)
    assert result.truncated and not result.terminated and result.steps == 5


def test_mask_from_info_moves_into_the_observation() -> None:
    env = from_gymnasium(gym.make("Taxi-v3"), mask_info_key="action_mask")
    assert is_masked(env.get_observation_space("agent_0"))
    obs, infos = env.reset(seed=1)
    np.testing.assert_array_equal(obs["agent_0"]["action_mask"], infos["agent_0"]["action_mask"])
    assert obs["agent_0"]["action_mask"].dtype == np.int8
    assert env.get_observation_space("agent_0").contains(obs["agent_0"])
    result = rollout(env, seed=1, max_steps=50)
    assert result.lengths["agent_0"] == result.steps


def test_masked_out_actions_raise_before_the_env_steps_unless_allowed() -> None:
    env = from_gymnasium(gym.make("Taxi-v3"), mask_info_key="action_mask")
    obs, _ = env.reset(seed=1)
    mask = obs["agent_0"]["action_mask"]
    illegal, legal = int(np.flatnonzero(mask == 0)[0]), int(np.flatnonzero(mask)[0])
    state = env.env.unwrapped.s
    with pytest.raises(IllegalActionError, match=rf"agent 'agent_0': received {illegal}"):
        env.step({"agent_0": illegal})
    assert env.env.unwrapped.s == state
    obs["agent_0"]["action_mask"][:] = 1  # the caller's copy: the check keeps its own
    with pytest.raises(IllegalActionError):
        env.step({"agent_0": illegal})
    _, infos = env.reset(seed=1)
    infos["agent_0"]["action_mask"][:] = 1  # Taxi's own int8 array: the check kept it as its own
    with pytest.raises(IllegalActionError):
        env.step({"agent_0": illegal})
    env.step({"agent_0": legal})
    permissive = from_gymnasium(gym.make("Taxi-v3"), mask_info_key="action_mask", check_legal=False)
    obs, _ = permissive.reset(seed=1)
    _, rewards, _, _, _ = permissive.step({"agent_0": illegal})  # Taxi itself answers an illegal move
    assert rewards["agent_0"] in (-1.0, -10.0)


class InfoMaskOf(gym.Wrapper):
    """Gives ``info["action_mask"]`` the value ``mask``."""

    def __init__(self, env: gym.Env, mask: Any) -> None:
        super().__init__(env)
        self.mask = mask

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        observation, info = self.env.reset(**kwargs)
        return observation, {**info, "action_mask": self.mask}


@pytest.mark.parametrize("mask", [np.ones(3, np.int8), np.array([1, 0, 1, 1], np.uint8), np.array([1, 255], np.uint8),
                                  [0.5, 1.0], [[1, 1]], "11", [1, [0]]])
def test_an_info_mask_that_is_not_one_0_or_1_per_action_is_named(mask: Any) -> None:
    # Cast as it was, [1, 255] became [1, -1] and a mask of the wrong size was taken and not applied.
    env = from_gymnasium(InfoMaskOf(gym.make("CartPole-v1"), mask), agent_id="cart", mask_info_key="action_mask")
    with pytest.raises(EnvContractError, match=r"agent 'cart' got an action_mask (of shape|with values other than 0 and 1|that is not an array)"):
        env.reset(seed=0)
    fine = from_gymnasium(InfoMaskOf(gym.make("CartPole-v1"), np.array([True, False])), mask_info_key="action_mask")
    obs, _ = fine.reset(seed=0)
    assert obs["agent_0"]["action_mask"].tolist() == [1, 0] and obs["agent_0"]["action_mask"].dtype == np.int8


class DropsFinalMask(gym.Wrapper):
    """Leaves ``info["action_mask"]`` out of the step that ends the episode."""

    def step(self, action: Any) -> tuple[Any, ...]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {k: v for k, v in info.items() if k != "action_mask"}
        return observation, reward, terminated, truncated, info


def test_a_final_step_without_a_mask_keeps_its_reward_with_an_all_zero_mask() -> None:
    env = from_gymnasium(DropsFinalMask(gym.make("Taxi-v3", max_episode_steps=3)), mask_info_key="action_mask")
    obs, _ = env.reset(seed=1)
    for _ in range(3):
        action = int(np.flatnonzero(obs["agent_0"]["action_mask"])[0])
        obs, rewards, _, truncateds, infos = env.step({"agent_0": action})
    assert truncateds["__all__"] and rewards["agent_0"] == -1.0 and "action_mask" not in infos["agent_0"]
    assert obs["agent_0"]["action_mask"].tolist() == [0] * 6
    assert env.get_observation_space("agent_0").contains(obs["agent_0"])
    env.reset(seed=1)  # while the episode goes on, a missing mask is still refused
    env.env.env.step = lambda action: (0, 0.0, False, False, {})
    with pytest.raises(EnvContractError, match="expected an action mask under info"):
        env.step({"agent_0": 0})


class TwoDials(gym.Env):
    """Two dials (MultiDiscrete([3, 2])); info carries Gymnasium's per-dimension mask tuple, which
    forbids repeating the first dial's last setting. Reward: how far the first dial moved."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.MultiDiscrete([3, 2])

    def _info(self) -> dict[str, Any]:
        first = np.ones(3, np.int8)
        first[self.setting] = 0
        return {"action_mask": (first, np.ones(2, np.int8))}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self.setting, self.turns = int(self.np_random.integers(3)), 0
        return self.setting, self._info()

    def step(self, action: Any) -> tuple[Any, ...]:
        reward = float(abs(int(action[0]) - self.setting))
        self.setting, self.turns = int(action[0]), self.turns + 1
        return self.setting, reward, False, self.turns >= 4, self._info()


def test_a_multidiscrete_mask_from_info_moves_into_the_observation_flat() -> None:
    # mask_info_key took Discrete action spaces only.
    env = from_gymnasium(TwoDials(), agent_id="dials", mask_info_key="action_mask")
    assert env.get_observation_space("dials")["action_mask"].shape == (5,)
    obs, _ = env.reset(seed=3)
    setting = obs["dials"]["observation"]
    expected = np.ones(5, np.int8)
    expected[setting] = 0
    assert obs["dials"]["action_mask"].tolist() == expected.tolist()
    with pytest.raises(IllegalActionError, match="agent 'dials'"):
        env.step({"dials": np.array([setting, 1])})
    assert env.env.setting == setting and env.env.turns == 0  # refused before the env stepped
    result = rollout(env, seed=3)
    assert result.steps == 4 and result.truncated and result.returns["dials"] >= 4.0  # every move changes the dial
    assert env.get_observation_space("dials").contains(obs["dials"])


def test_mask_needs_a_discrete_action_space_and_the_info_key() -> None:
    with pytest.raises(SpaceError, match="Discrete or MultiDiscrete action space for agent 'agent_0'"):
        from_gymnasium(gym.make("Pendulum-v1"), mask_info_key="action_mask")
    env = from_gymnasium(gym.make("CartPole-v1"), mask_info_key="action_mask")
    with pytest.raises(EnvContractError, match=r"info\['action_mask'\]"):
        env.reset(seed=0)


def test_from_gymnasium_rejects_what_is_not_a_gymnasium_env() -> None:
    with pytest.raises(SpaceError, match=r"needs a gymnasium.Env, received builtins.str \(build it first: "
                                         r"gymnasium.make\('CartPole-v1'\)\)") as raised:
        from_gymnasium("CartPole-v1")  # type: ignore[arg-type]
    assert isinstance(raised.value, UnsupportedEnvError)  # as the exporters' and other bridges' refusals
    with pytest.raises(SpaceError, match="'__all__'"):
        from_gymnasium(gym.make("CartPole-v1"), agent_id="__all__")


class _NoSpaces(gym.Env):
    """A gymnasium.Env that never set its spaces."""


def test_from_gymnasium_refuses_multi_agent_envs_and_envs_without_spaces() -> None:
    # A multi-agent env inside gym.make's wrappers (how RLlib builds registered envs) became a
    # one-agent env with spaces of None, failing at every step; ours raised a bare AttributeError.
    from bridges import wrap
    from examples.rock_paper_scissors import RockPaperScissors

    gym.register("test-multi-agent-rps-v0", entry_point=lambda **kwargs: RockPaperScissors(), disable_env_checker=True)
    try:
        wrapped = gym.make("test-multi-agent-rps-v0")
        for convert in (wrap, from_gymnasium):
            with pytest.raises(UnsupportedEnvError, match=r"from_gymnasium takes a single-agent env, but .* wraps "
                                                          r"marl_core\.envs\.RockPaperScissors, a "
                                                          r"multi-agent env \(marl_core\): use it as it is on env\.unwrapped"):
                convert(wrapped)
    finally:
        gym.registry.pop("test-multi-agent-rps-v0")
    with pytest.raises(UnsupportedEnvError, match=r"RockPaperScissors is a multi-agent env \(marl_core\): use it as it is$"):
        from_gymnasium(RockPaperScissors())
    from ray.rllib.examples.envs.classes.multi_agent.rock_paper_scissors import RockPaperScissors as RLlibRPS

    with pytest.raises(UnsupportedEnvError, match=r"a multi-agent env \(rllib\): bridge it with from_rllib$"):
        from_gymnasium(RLlibRPS({}))
    with pytest.raises(SpaceError, match=r"needs the observation_space \(a gymnasium Space\) of .*, received None"):
        from_gymnasium(_NoSpaces())


class _OldApi(gym.Env):
    """Gymnasium's pre-0.26 API: reset gives the observation alone, step four values."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, info: Any = None) -> None:
        self.info = info

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        return (0, self.info) if self.info is not None else 0

    def step(self, action: Any) -> tuple:
        return 1, 1.0, False, {}


def test_results_of_gymnasiums_old_api_are_named() -> None:
    # They were unpacking errors: "not enough values to unpack", "'int' object is not iterable".
    with pytest.raises(EnvContractError, match=r"reset\(\) returned an int; expected \(observation, info\) with info a dict"):
        from_gymnasium(_OldApi()).reset(seed=0)
    with pytest.raises(EnvContractError, match=r"reset\(\) returned a tuple of 2 \(int, list\); expected"):
        from_gymnasium(_OldApi(info=[])).reset(seed=0)
    env = from_gymnasium(_OldApi(info={}))
    env.reset(seed=0)
    with pytest.raises(EnvContractError, match=r"step\(\) returned a tuple of 4 \(int, float, bool, dict\); expected \(observation, "
                                               r"reward, terminated, truncated, info\)"):
        env.step({"agent_0": 0})
    with pytest.raises(ResetNeededError):
        env.step({"agent_0": 0})


def test_a_single_agent_view_of_a_multi_agent_env_is_taken() -> None:
    # A gymnasium wrapper that plays one side (with that side's spaces) is a single-agent env.
    from examples.rock_paper_scissors import RockPaperScissors

    class AgainstRock(gym.Wrapper):
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            self.observation_space = env.get_observation_space("player1")
            self.action_space = env.get_action_space("player1")

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
            obs, infos = self.env.reset(seed=seed, options=options)
            return obs["player1"], infos.get("player1", {})

        def step(self, action: Any) -> tuple:
            obs, rewards, terminateds, truncateds, _ = self.env.step({"player1": action, "player2": 0})
            return obs["player1"], rewards["player1"], terminateds[ALL], truncateds.get(ALL, False), {}

    env = from_gymnasium(AgainstRock(RockPaperScissors()))
    env.reset(seed=0)
    _, rewards, _, _, _ = env.step({"agent_0": 1})  # paper beats rock
    assert rewards == {"agent_0": 1.0}


class NamesItsHero(gym.Env):
    """A single-agent env that lists its agent(s) in possible_agents, with plain spaces."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, agents: list[str]) -> None:
        self.possible_agents = agents

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, True, False, {}


@pytest.mark.parametrize("agents", [["hero"], ["player_0", "player_1"]])
def test_a_single_agent_env_with_possible_agents_but_plain_spaces_is_taken(agents: list[str]) -> None:
    env = from_gymnasium(NamesItsHero(agents))
    env.reset(seed=0)
    assert env.step({"agent_0": 1})[1] == {"agent_0": 1.0}


def test_results_in_a_tuple_subclass_are_taken() -> None:
    from collections import namedtuple

    reset_result = namedtuple("Reset", "observation info")

    class NamedResults(_OldApi):
        def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
            return reset_result(0, {})

    env = from_gymnasium(NamedResults())
    assert env.reset(seed=0) == ({"agent_0": 0}, {"agent_0": {}})


def test_to_gymnasium_goes_on_after_a_masked_action_its_env_refused() -> None:
    # The refused action cost the episode: the next, legal step raised ResetNeededError.
    single = to_gymnasium(from_gymnasium(gym.make("Taxi-v3"), mask_info_key="action_mask"))
    observation, _ = single.reset(seed=0)
    mask = observation["action_mask"]
    with pytest.raises(IllegalActionError):
        single.step(int(np.flatnonzero(mask == 0)[0]))
    single.step(int(np.flatnonzero(mask)[0]))


def test_a_masked_action_refused_inside_nested_bridges_leaves_every_level_going() -> None:
    # The outer GymnasiumEnv gave up its agent before stepping: the refusal underneath ended its episode.
    inner = from_gymnasium(gym.make("Taxi-v3"), agent_id="taxi", mask_info_key="action_mask")
    outer = from_gymnasium(to_gymnasium(inner), agent_id="driver")
    obs, _ = outer.reset(seed=0)
    mask = obs["driver"]["action_mask"]
    with pytest.raises(IllegalActionError):
        outer.step({"driver": int(np.flatnonzero(mask == 0)[0])})
    assert outer.agents == ["driver"]
    outer.step({"driver": int(np.flatnonzero(mask)[0])})


def test_a_refused_seed_leaves_to_gymnasiums_generator_as_it_was() -> None:
    single, twin = (to_gymnasium(from_gymnasium(gym.make("CartPole-v1"), agent_id="cart")) for _ in range(2))
    single.reset(seed=5)
    twin.reset(seed=5)
    with pytest.raises(SeedError):
        single.reset(seed=True)
    assert single.np_random_seed == 5 and single.np_random.random() == twin.np_random.random()
    # numpy's integers are seeds, as everywhere else in the bridges (Gymnasium refused them here).
    assert np.array_equal(single.reset(seed=np.int64(3))[0], twin.reset(seed=3)[0])
    assert single.np_random_seed == 3


def _check_env_warnings(env: gym.Env) -> set[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(env)
    return {str(w.message) for w in caught}


NO_SPEC = "Not able to test alternative render modes due to the environment not having a spec"


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "CartPole-v1", "FrozenLake-v1"])
def test_to_gymnasium_passes_gymnasiums_check_env(env_id: str) -> None:
    single = to_gymnasium(make_multi_agent(env_id)({"num_agents": 1}))
    assert isinstance(single, SingleAgentEnv)
    ours = _check_env_warnings(single)
    raw = _check_env_warnings(gym.make(env_id).unwrapped)
    # Only the checker's advice that the raw env gets too, plus "no spec" (we are not registered).
    assert {w for w in ours if NO_SPEC not in w} <= raw


def test_to_gymnasium_keeps_masked_observations_and_passes_check_env() -> None:
    # Gymnasium's checker draws actions without the mask: let them reach Taxi, which allows them.
    single = to_gymnasium(from_gymnasium(gym.make("Taxi-v3"), mask_info_key="action_mask", check_legal=False))
    assert isinstance(single.observation_space, gym.spaces.Dict)
    assert {w for w in _check_env_warnings(single) if NO_SPEC not in w} == set()


def test_to_gymnasium_matches_make_multi_agent_rewards() -> None:
    multi = make_multi_agent("CartPole-v1")({"num_agents": 1})
    single = to_gymnasium(make_multi_agent("CartPole-v1")({"num_agents": 1}))
    single_obs, _ = single.reset(seed=4)
    multi_obs, _ = multi.reset(seed=4)
    np.testing.assert_array_equal(single_obs, multi_obs["agent_0"])
    for step in range(500):
        action = step % 2
        obs, reward, terminated, truncated, _ = single.step(action)
        m_obs, m_rewards, m_term, m_trunc, _ = multi.step({"agent_0": action})
        np.testing.assert_array_equal(obs, m_obs["agent_0"])
        assert (reward, terminated, truncated) == (m_rewards["agent_0"], m_term[ALL], m_trunc[ALL])
        if terminated or truncated:
            break
    with pytest.raises(ResetNeededError):
        single.step(0)


def test_to_gymnasium_needs_exactly_one_agent() -> None:
    with pytest.raises(SpaceError, match=r"exactly one possible agent, received 2: \['agent_0', 'agent_1'\]"):
        to_gymnasium(make_multi_agent("CartPole-v1")({"num_agents": 2}))


def test_to_gymnasium_rejects_invalid_actions_before_stepping() -> None:
    single = to_gymnasium(make_multi_agent("CartPole-v1")({"num_agents": 1}))
    single.reset(seed=0)
    with pytest.raises(InvalidActionError, match="agent 'agent_0'"):
        single.step(2)
    with pytest.raises(MultiAgentEnvError):
        single.step(np.array([0.5]))
    single.step(0)


class _EndsWithoutObservation(MultiAgentEnv):
    """One agent; the last step sets '__all__' without a final observation (allowed by RLlib)."""

    def __init__(self) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["solo"]
        self.observation_spaces = {"solo": gym.spaces.Discrete(4)}
        self.action_spaces = {"solo": gym.spaces.Discrete(2)}
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"solo": 0}, {}

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 3
        obs = {} if done else {"solo": self.t}
        return obs, {"solo": 1.0}, {"__all__": done}, {"__all__": False}, {"__common__": {"t": self.t}}


def test_to_gymnasium_marks_a_missing_final_observation() -> None:
    single = to_gymnasium(_EndsWithoutObservation())
    single.reset(seed=0)
    single.step(0)
    obs, reward, terminated, truncated, info = single.step(1)
    assert (obs, reward, terminated, info["__common__"]) == (2, 1.0, False, {"t": 2})
    obs, reward, terminated, truncated, info = single.step(1)
    assert (obs, reward, terminated, truncated) == (2, 1.0, True, False)
    assert info["final_observation_missing"] is True


class _EndsBothWays(_EndsWithoutObservation):
    """The last step both terminates and truncates the one agent (a time limit on the last move)."""

    def step(self, action_dict):
        self.t += 1
        done = self.t >= 2
        return {"solo": self.t}, {"solo": 1.0}, {"solo": done, "__all__": done}, {"solo": done}, {}


def test_to_gymnasium_keeps_both_end_flags() -> None:
    single = to_gymnasium(_EndsBothWays())
    single.reset(seed=0)
    assert single.step(0)[2:4] == (False, False)
    assert single.step(0)[2:4] == (True, True)


def test_a_failed_reset_leaves_the_bridge_needing_a_reset() -> None:
    env = from_gymnasium(gym.make("CartPole-v1"), mask_info_key="action_mask")  # CartPole gives no mask
    with pytest.raises(EnvContractError, match="expected an action mask under info"):
        env.reset(seed=0)
    assert env.agents == []
    with pytest.raises(ResetNeededError):
        env.step({"agent_0": 0})
    assert env.env.unwrapped.steps_beyond_terminated is None and env.env._elapsed_steps == 0


def test_numpy_integer_seeds_reach_gymnasium_as_python_ints() -> None:
    # Gymnasium refuses numpy integers; PettingZoo and OpenSpiel take them, so the bridges do too.
    expected = gym.make("CartPole-v1").reset(seed=3)[0]
    np.testing.assert_array_equal(from_gymnasium(gym.make("CartPole-v1")).reset(seed=np.int64(3))[0]["agent_0"], expected)
    multi = make_multi_agent("CartPole-v1")({"num_agents": 2})
    np.testing.assert_array_equal(multi.reset(seed=np.uint8(3))[0]["agent_0"], expected)


@pytest.mark.parametrize(
    ("reward", "words"),
    [(np.array(True), "a reward that is a bool (array(True)), not a number; return float(...) of it"),
     (np.False_, "a reward that is a bool (np.False_), not a number"),  # it spoke of multi-objective vectors
     (True, "a reward that is a bool (True), not a number"),
     (np.array("1.5"), "a reward that is not one number"), (np.complex128(1 + 2j), "a reward that is not one number"),
     (10**400, "a reward that is not one number")],
    ids=["bool array", "numpy bool", "bool", "str array", "complex", "huge int"],
)
def test_rewards_float_would_coerce_or_overflow_on_are_refused(reward, words) -> None:
    with pytest.raises(EnvContractError, match=re.escape(words)):
        scalar_reward("agent_0", reward, "env")
    assert scalar_reward("agent_0", np.array(2.5), "env") == 2.5


def test_the_bridge_seeds_its_own_generator() -> None:
    from gymnasium.utils import seeding

    env = from_gymnasium(gym.make("CartPole-v1"))
    env.reset(seed=9)
    assert env.np_random_seed == 9
    assert env.np_random.integers(1 << 30) == seeding.np_random(9)[0].integers(1 << 30)


class _VectorReward(gym.Env):
    """A multi-objective env: two objectives, one reward entry each."""

    observation_space = action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return 1, np.array([1.0, -1.0], np.float32), False, False, {}


def test_a_reward_that_is_not_one_number_is_named_and_ends_the_episode() -> None:
    for env in (from_gymnasium(_VectorReward()), make_multi_agent(lambda config: _VectorReward())()):
        env.reset(seed=0)
        with pytest.raises(EnvContractError, match=r"agent 'agent_0' a reward that is not one number: array\(\[ 1., -1.\]"):
            env.step({"agent_0": 1})
        with pytest.raises(ResetNeededError):
            env.step({"agent_0": 1})
        env.reset(seed=0)


class _StrayKeys(_EndsWithoutObservation):
    """Infos or rewards under ids that are not the one agent's."""

    def __init__(self, infos, rewards) -> None:
        super().__init__()
        self.stray_infos, self.stray_rewards = infos, rewards

    def step(self, action_dict):
        return {"solo": 1}, self.stray_rewards, {"__all__": False}, {"__all__": False}, self.stray_infos


def test_to_gymnasium_needs_a_reset_after_a_reward_that_is_not_one_number() -> None:
    single = to_gymnasium(_StrayKeys({}, {"solo": np.array([1.0, 2.0])}))
    single.reset(seed=0)
    with pytest.raises(EnvContractError, match="a reward that is not one number"):
        single.step(0)
    with pytest.raises(ResetNeededError):
        single.step(0)
    for not_a_number, words in (("2.5", "a reward that is not one number: '2.5'"),  # float() takes both silently
                                (True, "a reward that is a bool (True), not a number")):
        single = to_gymnasium(_StrayKeys({}, {"solo": not_a_number}))
        single.reset(seed=0)
        with pytest.raises(EnvContractError, match=re.escape(words)):
            single.step(0)


@pytest.mark.parametrize(
    ("infos", "rewards", "named"),
    [({"ghost": {"x": 1}}, {"solo": 1.0}, r"infos for agents \['ghost'\]"),
     ({}, {"solo": 1.0, "__common__": 5.0}, r"rewards for agents \['__common__'\]")],
)
def test_to_gymnasium_refuses_what_it_would_drop(infos, rewards, named) -> None:
    single = to_gymnasium(_StrayKeys(infos, rewards))
    single.reset(seed=0)
    with pytest.raises(EnvContractError, match=named):
        single.step(0)
    fine = to_gymnasium(_StrayKeys({"__common__": {"t": 1}}, {"solo": 1.0}))
    fine.reset(seed=0)
    assert fine.step(0)[4] == {"__common__": {"t": 1}}


def test_make_multi_agent_keeps_the_envs_render_metadata() -> None:
    multi = make_multi_agent("CartPole-v1")({"num_agents": 1, "render_mode": "rgb_array"})
    assert multi.metadata["render_modes"] == gym.make("CartPole-v1").metadata["render_modes"]
    # gymnasium's check_env raised "With no render_modes, expects the Env.render_mode to be None".
    assert not [w for w in _check_env_warnings(to_gymnasium(multi)) if "render" in w.lower() and NO_SPEC not in w]


def test_the_two_directions_undo_each_other() -> None:
    raw = gym.make("CartPole-v1")
    ours = from_gymnasium(raw)
    assert isinstance(ours, GymnasiumEnv)
    assert to_gymnasium(ours) is raw
    multi = make_multi_agent("CartPole-v1")({"num_agents": 1})
    assert from_gymnasium(to_gymnasium(multi)) is multi
    assert from_gymnasium(to_gymnasium(multi), agent_id="agent_0") is multi
    renamed = from_gymnasium(to_gymnasium(multi), agent_id="pole")
    assert isinstance(renamed, GymnasiumEnv) and renamed.possible_agents == ["pole"]
    assert "GymnasiumEnv" in str(ours) and "CartPole" in str(ours)
    # An env with its own agent id keeps it: to_gymnasium unwrapped it, and from_gymnasium named it agent_0.
    cart = from_gymnasium(gym.make("CartPole-v1"), agent_id="cart")
    assert from_gymnasium(to_gymnasium(cart)) is cart
    # ... and the Gymnasium env it is keeps the spec and attributes of the one inside (both were lost).
    back = to_gymnasium(cart)
    assert back.spec is not None and back.spec.id == "CartPole-v1"
    assert back.get_wrapper_attr("gravity") == 9.8 and back.get_wrapper_attr("agent_id") == "cart"
    assert back.has_wrapper_attr("gravity") and back.has_wrapper_attr("agent_id")  # gymnasium.utils.play asks
    assert not back.has_wrapper_attr("nothing_here")
    with pytest.raises(AttributeError, match="nothing_here"):
        back.get_wrapper_attr("nothing_here")
    assert back.set_wrapper_attr("gravity", 1.0) and back.get_wrapper_attr("gravity") == 1.0
    assert back.unwrapped is back and cart.env.unwrapped.gravity == 1.0  # set on the env that has it
    assert back.set_wrapper_attr("extra", 3) and vars(back)["extra"] == 3  # forced onto this env
    assert not back.set_wrapper_attr("other", 4, force=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(back, skip_render_check=False)
    assert not [w for w in caught if "alternative render modes" in str(w.message)]  # said without a spec
