"""The seeds' RockPaperScissors and TicTacToe, written against RLlib's class, train with our PPO."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from bridges.rllib import from_rllib
from tests.fixtures import rllib_seed_envs


def rllib_env(cls: type, config: dict[str, Any]) -> Any:
    """Creator for the trainer: the RLlib env built from ``config``, bridged."""
    return from_rllib(cls(config))


@pytest.mark.ray
@pytest.mark.parametrize("cls", [rllib_seed_envs.RockPaperScissors, rllib_seed_envs.TicTacToe])
def test_our_trainer_runs_on_rllib_seed_envs(cls: type) -> None:
    import torch

    from marl_core.ppo import PPOConfig

    torch.set_num_threads(1)
    config = (
        PPOConfig()
        .environment(functools.partial(rllib_env, cls))
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2)
        .training(train_batch_size=64, minibatch_size=32, num_epochs=1)
        .resources(num_cpus=1)
        .debugging(seed=0)
    )
    algo = config.build()
    try:
        first = algo.train()
        second = algo.train()
    finally:
        algo.stop()
    assert first["num_env_steps_sampled"] >= 64
    assert second["num_env_steps_sampled"] >= 64
    assert sorted(first["policies"]) == ["default_policy"]
