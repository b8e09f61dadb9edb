"""Envs written against RLlib's class train with our PPO through from_rllib: the seeds' own
RockPaperScissors and TicTacToe (on Ray env runners) and RLlib's example multi-agent envs."""

from __future__ import annotations

import functools
import importlib
from typing import Any

import pytest

from bridges.compat.rllib_cases import CASES
from bridges.rllib import from_rllib
from tests.fixtures import rllib_seed_envs

RUNNABLE = [pytest.param(case, id=case.id) for case in CASES if case.left_out is None]


def rllib_env(cls: type, kwargs: dict[str, Any] | None, config: dict[str, Any]) -> Any:
    """Creator for the trainer: the RLlib env (from ``kwargs``, else from ``config``), bridged."""
    return from_rllib(cls(**kwargs) if kwargs is not None else cls(config))


def _config(creator: Any, runners: int) -> Any:
    from marl_core.ppo import PPOConfig

    return (
        PPOConfig()
        .environment(creator)
        .env_runners(num_env_runners=runners, num_envs_per_env_runner=2)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .resources(num_cpus=1, torch_threads=1)
        .debugging(seed=0)
    )


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("cls", [rllib_seed_envs.RockPaperScissors, rllib_seed_envs.TicTacToe])
def test_our_trainer_runs_on_rllib_seed_envs_with_ray_env_runners(cls: type) -> None:
    algo = _config(functools.partial(rllib_env, cls, None), runners=1).build()
    try:
        first = algo.train()
        second = algo.train()
    finally:
        algo.stop()
    assert first["num_env_steps_sampled"] >= 64 and second["num_env_steps_sampled"] >= 64
    assert sorted(first["policies"]) == ["default_policy"]


@pytest.mark.parametrize("case", RUNNABLE)
def test_our_trainer_runs_one_iteration_on_rllib_examples(case: Any) -> None:
    module, attr = case.target.split(":")
    creator = functools.partial(rllib_env, getattr(importlib.import_module(module), attr), dict(case.kwargs))
    algo = _config(creator, runners=0).build()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["num_env_steps_sampled"] == 64
