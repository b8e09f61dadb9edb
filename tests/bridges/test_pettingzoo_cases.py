"""Acceptance over the case table: every classic, butterfly, sisl and mpe2 env, AEC and parallel.

Each test is parametrized by ``bridges.compat.pettingzoo_cases.CASES``; slow rows run in the slow
tier. Generic conversions are forced with a plain ``MultiAgentWrapper`` in between, since
``to_aec(PettingZooEnv(env))`` gives back ``env`` itself.
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest
from gymnasium.utils.env_checker import data_equivalence
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

from bridges.compat.pettingzoo_cases import CASES
from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv, to_aec, to_parallel
from marl_core.conformance import check_env
from marl_core.env import ALL, MultiAgentWrapper
from tests.bridges.test_pettingzoo_support import (
    aec_turns,
    bridged_trace,
    factory,
    params,
    raw_aec_trace,
    raw_parallel_trace,
)

AEC = [c for c in CASES if c.source == "pettingzoo-aec"]
PARALLEL = [c for c in CASES if c.source == "pettingzoo-parallel"]

pytestmark = [
    # texas_holdem_no_limit_v6 builds its observation Box from float64 bounds; gymnasium warns then.
    pytest.mark.filterwarnings("ignore:.*Box (low|high)'s precision lowered by casting:UserWarning"),
    # cooperative_pong and pursuit ask pygame for a font this machine may not have.
    pytest.mark.filterwarnings("ignore:The system font .* couldn't be found:UserWarning"),
    # cooperative_pong's reset() calls its own render(), which warns when no render_mode was given.
    pytest.mark.filterwarnings("ignore:.*You are calling render method without specifying any render mode"),
]

# PettingZoo's api tests warn about env properties (dict observations, infinite bounds, ...)
# that are the envs' own design; the tests judge by their assertions.
api_warnings = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test")


def _bridge(case):
    return PettingZooEnv if case.source == "pettingzoo-aec" else ParallelPettingZooEnv


def test_table_covers_every_env_of_the_four_families():
    from mpe2.all_modules import mpe_environments
    from pettingzoo.butterfly.all_modules import butterfly_environments
    from pettingzoo.classic.all_modules import classic_environments
    from pettingzoo.sisl.all_modules import sisl_environments

    families = {**classic_environments, **butterfly_environments, **sisl_environments, **mpe_environments}
    assert sorted(c.id.split("/", 1)[1].rsplit("/", 1)[0] for c in AEC) == sorted(families)
    with_parallel = sorted(name for name, module in families.items() if hasattr(module, "parallel_env"))
    assert sorted(c.id.split("/", 1)[1].rsplit("/", 1)[0] for c in PARALLEL) == with_parallel
    assert len({c.id for c in CASES}) == len(CASES) == 44
    assert all(c.left_out is None for c in CASES)


@pytest.mark.parametrize("case", params(AEC))
def test_aec_bridge_reproduces_the_raw_env(case):
    make = factory(case)
    for seed in (0, 7):
        raw, raw_returns = raw_aec_trace(make(), seed, case.max_steps)
        ours, returns = bridged_trace(PettingZooEnv(make()), seed, case.max_steps)
        assert [a for a, _ in ours] == [a for a, _ in raw]
        for index, ((agent_id, expected), (_, observed)) in enumerate(zip(raw, ours, strict=True)):
            assert data_equivalence(observed, expected), f"observation {index} of {agent_id} differs"
        assert set(returns) == set(raw_returns)
        for agent_id, expected in raw_returns.items():
            assert math.isclose(returns[agent_id], expected, rel_tol=1e-9, abs_tol=1e-9), agent_id


@pytest.mark.parametrize("case", params(PARALLEL))
def test_parallel_bridge_reproduces_the_raw_env(case):
    make = factory(case)
    for seed in (0, 7):
        raw, raw_returns = raw_parallel_trace(make(), seed, case.max_steps)
        ours, returns = bridged_trace(ParallelPettingZooEnv(make()), seed, case.max_steps)
        assert [a for a, _ in ours] == [a for a, _ in raw]
        for index, ((agent_id, expected), (_, observed)) in enumerate(zip(raw, ours, strict=True)):
            assert data_equivalence(observed, expected), f"observation {index} of {agent_id} differs"
        assert returns == pytest.approx(raw_returns, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", params(AEC))
def test_generic_to_aec_of_the_bridge_behaves_like_the_raw_env(case):
    make = factory(case)
    turns = 4 * (case.max_steps or 1000)
    raw = aec_turns(make(), 3, turns)
    ours = aec_turns(to_aec(MultiAgentWrapper(PettingZooEnv(make()))), 3, turns)
    assert [t[0] for t in ours] == [t[0] for t in raw]
    for (agent_id, *expected), (_, *observed) in zip(raw, ours, strict=True):
        obs, reward, terminated, truncated, info = observed
        assert data_equivalence(obs, expected[0]), agent_id
        assert math.isclose(reward, expected[1], rel_tol=1e-9, abs_tol=1e-9), agent_id
        assert (terminated, truncated) == (expected[2], expected[3]), agent_id
        assert data_equivalence(info, expected[4]), agent_id


@api_warnings
@pytest.mark.parametrize("case", params(AEC))
def test_pettingzoo_api_and_seed_tests_pass_on_to_aec(case):
    make = factory(case)
    raw = make()
    assert to_aec(PettingZooEnv(raw)) is raw
    cycles = case.max_steps or 1000
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        api_test(to_aec(PettingZooEnv(make())), num_cycles=cycles)
        api_test(to_aec(MultiAgentWrapper(PettingZooEnv(make()))), num_cycles=cycles)
    assert printed.getvalue().count("Passed API test") == 2
    seed_test(lambda: to_aec(MultiAgentWrapper(PettingZooEnv(make()))), num_cycles=50)


@api_warnings
@pytest.mark.parametrize("case", params(PARALLEL))
def test_pettingzoo_parallel_api_and_seed_tests_pass_on_to_parallel(case):
    make = factory(case)
    raw = make()
    assert to_parallel(ParallelPettingZooEnv(raw)) is raw
    cycles = case.max_steps or 1000
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        parallel_api_test(to_parallel(ParallelPettingZooEnv(make())), num_cycles=cycles)
        parallel_api_test(to_parallel(MultiAgentWrapper(ParallelPettingZooEnv(make()))), num_cycles=cycles)
    assert printed.getvalue().count("Passed Parallel API test") == 2
    parallel_seed_test(lambda: to_parallel(MultiAgentWrapper(ParallelPettingZooEnv(make()))), num_cycles=50)


@pytest.mark.parametrize("case", params(CASES))
def test_check_env_reports_no_error(case):
    bridge, make = _bridge(case), factory(case)
    report = check_env(lambda: bridge(make()), seed=0, episodes=2, max_steps=case.max_steps or 1000)
    assert report.ok, "\n".join(str(f) for f in report.errors)


@pytest.mark.parametrize("case", params(CASES))
def test_seeded_episodes_repeat_and_render_passes_through(case):
    bridge, make = _bridge(case), factory(case, render_mode="rgb_array")
    env = bridge(make())
    assert env.render_mode == "rgb_array"
    first = bridged_trace(env, 5, 6)
    frame = env.render()
    assert isinstance(frame, np.ndarray) and frame.ndim == 3
    assert data_equivalence(bridged_trace(env, 5, 6), first)
    raw = make()
    if case.source == "pettingzoo-aec":
        raw_aec_trace(raw, 5, 6)
    else:
        raw_parallel_trace(raw, 5, 6)
    assert np.array_equal(raw.render(), frame)
    env.close()


@pytest.mark.parametrize("case", params(CASES))
def test_spaces_are_the_envs_own_per_agent(case):
    raw = factory(case)()
    env = _bridge(case)(raw)
    assert env.env is raw
    assert env.possible_agents == list(raw.possible_agents)
    for agent_id in raw.possible_agents:
        assert env.get_observation_space(agent_id) is raw.observation_space(agent_id)
        assert env.get_action_space(agent_id) is raw.action_space(agent_id)
    obs, infos = env.reset(seed=1)
    assert set(infos) <= set(obs)
    assert env.agents == list(raw.agents)
    for agent_id, observation in obs.items():
        assert env.get_observation_space(agent_id).contains(observation)
    step = env.step({a: env.get_action_space(a).sample() if not isinstance(o, dict) else int(np.flatnonzero(o["action_mask"])[0]) for a, o in obs.items()})
    assert ALL in step[2] and ALL in step[3]
