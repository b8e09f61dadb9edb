"""SuperSuit composes on both sides of the PettingZoo bridges.

Before: SuperSuit wraps the PettingZoo env, our bridge wraps the result. After: ``to_aec`` /
``to_parallel`` turn our env back into PettingZoo, SuperSuit wraps that, and PettingZoo's own
api tests judge it. The generic converters are forced with a plain ``MultiAgentWrapper``.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from gymnasium.spaces import Box
from gymnasium.utils.env_checker import data_equivalence
from mpe2 import simple_world_comm_v3
from pettingzoo.butterfly.pistonball import pistonball
from pettingzoo.sisl.multiwalker import multiwalker
from pettingzoo.test import api_test, parallel_api_test

# Names, not the module: supersuit's module __getattr__ raises ImportError on the probes of doctest collection.
from supersuit import (
    black_death_v3,
    color_reduction_v0,
    frame_skip_v0,
    frame_stack_v1,
    pad_observations_v0,
    resize_v1,
)

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv, to_aec, to_parallel
from marl_core.conformance import check_env
from marl_core.env import MultiAgentWrapper
from marl_core.rollout import play, rollout
from tests.bridges.test_pettingzoo_support import bridged_trace, raw_aec_trace, raw_parallel_trace
from tests.fixtures.envs import JoinLeaveEnv, RockPaperScissors

api_warnings = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test")


def grey_small_stacked(env):
    """The usual image pipeline: greyscale, 32x32, three frames stacked."""
    return frame_stack_v1(resize_v1(color_reduction_v0(env, "full"), 32, 32), 3)


def test_image_wrappers_before_the_aec_bridge():
    make = lambda: grey_small_stacked(pistonball.env(max_cycles=4))  # noqa: E731
    env = PettingZooEnv(make())
    assert env.get_observation_space("piston_0") == Box(0, 255, (32, 32, 3), np.uint8)
    raw, raw_returns = raw_aec_trace(make(), 0, None)
    ours, returns = bridged_trace(env, 0, None)
    assert [a for a, _ in ours] == [a for a, _ in raw] and data_equivalence(ours, raw)
    assert returns == pytest.approx(raw_returns)
    assert check_env(lambda: PettingZooEnv(make()), episodes=1).ok


def test_image_wrappers_before_the_parallel_bridge():
    make = lambda: grey_small_stacked(pistonball.parallel_env(max_cycles=4))  # noqa: E731
    raw, raw_returns = raw_parallel_trace(make(), 0, None)
    ours, returns = bridged_trace(ParallelPettingZooEnv(make()), 0, None)
    assert data_equivalence(ours, raw) and returns == pytest.approx(raw_returns)
    assert ours[-1][1].shape == (32, 32, 3)


@pytest.mark.parametrize("api", ["aec", "parallel"])
def test_padding_before_the_bridges_makes_spaces_equal(api):
    make = simple_world_comm_v3.env if api == "aec" else simple_world_comm_v3.parallel_env
    env = (PettingZooEnv if api == "aec" else ParallelPettingZooEnv)(pad_observations_v0(make()))
    assert {env.get_observation_space(a).shape for a in env.possible_agents} == {(34,)}
    assert {make().observation_space(a).shape for a in env.possible_agents} == {(34,), (28,)}
    result = rollout(env, seed=0)
    assert result.truncated and set(result.returns) == set(env.possible_agents)


def test_black_death_before_the_parallel_bridge_keeps_fallen_walkers_observed():
    env = ParallelPettingZooEnv(black_death_v3(multiwalker.parallel_env(terminate_on_fall=False, max_cycles=120)))
    zero_seen = False
    for transition in play(env, seed=0, max_steps=100):
        assert sorted(transition.obs) == sorted(env.possible_agents)
        zero_seen |= any(not np.any(o) for o in transition.obs.values())
    assert zero_seen  # a walker fell and black death observed it as zeros


@api_warnings
def test_image_wrappers_after_to_aec_and_to_parallel():
    aec = grey_small_stacked(to_aec(MultiAgentWrapper(PettingZooEnv(pistonball.env(max_cycles=4)))))
    parallel = grey_small_stacked(
        to_parallel(MultiAgentWrapper(ParallelPettingZooEnv(pistonball.parallel_env(max_cycles=4))))
    )
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(aec, num_cycles=8)
        parallel_api_test(parallel, num_cycles=8)
    assert printed.getvalue().count("Passed") == 2
    obs, _ = parallel.reset(seed=0)
    assert obs["piston_3"].shape == (32, 32, 3) and aec.observation_space("piston_3").shape == (32, 32, 3)


@api_warnings
def test_padding_after_to_aec_and_to_parallel():
    aec = pad_observations_v0(to_aec(MultiAgentWrapper(PettingZooEnv(simple_world_comm_v3.env()))))
    parallel = pad_observations_v0(
        to_parallel(MultiAgentWrapper(ParallelPettingZooEnv(simple_world_comm_v3.parallel_env())))
    )
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(aec, num_cycles=10)
        parallel_api_test(parallel, num_cycles=10)
    assert printed.getvalue().count("Passed") == 2
    obs, _ = parallel.reset(seed=0)
    assert {o.shape for o in obs.values()} == {(34,)}


def test_black_death_after_to_parallel_zeroes_the_agent_that_left():
    env = black_death_v3(to_parallel(JoinLeaveEnv()))
    env.reset(seed=0)
    for step in range(1, 8):
        obs, rewards, _, _, _ = env.step({agent_id: 1 for agent_id in env.env.agents})
        if step <= 4:
            assert obs["scout"][0] != 0.0
        else:  # scout terminated at step 4: black death observes it as zeros from then on
            assert not np.any(obs["scout"]) and rewards["scout"] == 0.0


def test_frame_skip_after_to_parallel_draws_from_the_envs_generator():
    # It read env.unwrapped.np_random, which the export did not have (an AttributeError at the first step).
    source = RockPaperScissors()
    env = frame_skip_v0(to_parallel(source), (2, 4))
    env.reset(seed=3)
    assert env.unwrapped.np_random is source.np_random
    obs, *_ = env.step({agent_id: 1 for agent_id in env.agents})
    assert obs and 2 <= source.num_moves <= 4
