"""Support for the PettingZoo bridge tests (no tests here): build case envs, play raw and bridged loops."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from bridges.compat import Case
from marl_core.env import MultiAgentEnv
from marl_core.rollout import RandomPolicy, play
from marl_core.spaces import action_mask_of, sample_action

Trace = list[tuple[str, Any]]


def factory(case: Case, **overrides: Any) -> Callable[[], Any]:
    """A zero-argument factory of the case's raw PettingZoo env."""
    module_name, attr = case.target.split(":")
    build = getattr(importlib.import_module(module_name), attr)
    kwargs = {**case.kwargs, **overrides}
    return lambda: build(**kwargs)


def params(cases: list[Case]) -> list[Any]:
    """pytest params for ``cases``: the case id as test id, ``slow`` rows marked slow."""
    return [
        pytest.param(case, id=case.id, marks=[pytest.mark.slow] if case.slow else [])
        for case in cases
        if case.left_out is None
    ]


def raw_aec_trace(env: Any, seed: int, max_steps: int | None) -> tuple[Trace, dict[str, float]]:
    """PettingZoo's own loop (``agent_iter`` + ``last()``), random legal actions from ``seed``.

    Returns every ``(agent, observation)`` that ``last()`` showed, in order, and each agent's
    return: what ``last()`` reported, plus what it holds for the others when the cap stops the loop.
    """
    env.reset(seed=seed)
    rng = RandomPolicy.rng_for(seed)  # the actions RandomPolicy(env, seed) draws
    trace: Trace = []
    returns: dict[str, float] = {}
    actions = 0
    for agent_id in env.agent_iter():
        observation, reward, terminated, truncated, _ = env.last()
        trace.append((agent_id, observation))
        returns[agent_id] = returns.get(agent_id, 0.0) + float(reward)
        if terminated or truncated:
            env.step(None)
            continue
        if max_steps is not None and actions >= max_steps:
            for other in env.agents:
                if other != agent_id:
                    returns[other] = returns.get(other, 0.0) + float(env._cumulative_rewards[other])
            break
        space = env.action_space(agent_id)
        env.step(sample_action(space, rng, action_mask_of(observation), agent_id))
        actions += 1
    return trace, returns


def raw_parallel_trace(env: Any, seed: int, max_steps: int | None) -> tuple[Trace, dict[str, float]]:
    """A ParallelEnv loop drawing the same random legal actions as :class:`RandomPolicy`."""
    obs, _ = env.reset(seed=seed)
    rng = RandomPolicy.rng_for(seed)
    trace: Trace = list(obs.items())
    returns: dict[str, float] = {}
    steps = 0
    while env.agents and (max_steps is None or steps < max_steps):
        live = set(env.agents)
        actions = {
            a: sample_action(env.action_space(a), rng, action_mask_of(o), a) for a, o in obs.items() if a in live
        }
        obs, rewards, _, _, _ = env.step(actions)
        steps += 1
        trace.extend(obs.items())
        for agent_id, reward in rewards.items():
            returns[agent_id] = returns.get(agent_id, 0.0) + float(reward)
    return trace, returns


def bridged_trace(env: MultiAgentEnv, seed: int, max_steps: int | None) -> tuple[Trace, dict[str, float]]:
    """Our episode loop with :class:`RandomPolicy`: every observation in order, and the returns."""
    trace: Trace = []
    returns: dict[str, float] = {}
    for transition in play(env, RandomPolicy(env, seed), seed=seed, max_steps=max_steps or 10**9):
        trace.extend(transition.obs.items())
        for agent_id, reward in transition.rewards.items():
            returns[agent_id] = returns.get(agent_id, 0.0) + float(reward)
    return trace, returns


def aec_turns(env: Any, seed: int, max_turns: int) -> list[tuple[Any, ...]]:
    """``(agent, observation, reward, terminated, truncated, info)`` at every turn of an AEC loop."""
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    turns = []
    for agent_id in env.agent_iter(max_turns):
        observation, reward, terminated, truncated, info = env.last()
        turns.append((agent_id, observation, float(reward), terminated, truncated, info))
        if terminated or truncated:
            env.step(None)
        else:
            env.step(sample_action(env.action_space(agent_id), rng, action_mask_of(observation), agent_id))
    return turns
