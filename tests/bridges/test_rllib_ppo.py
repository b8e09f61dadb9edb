"""RLlib's own PPO (its current API stack) trains on ``to_rllib`` of our envs."""

from __future__ import annotations

import pytest

from bridges.rllib import to_rllib
from examples.tic_tac_toe import TicTacToe
from tests.fixtures.envs import TeamRewardAfterAnEndEnv


@pytest.mark.ray
@pytest.mark.slow
# TeamRewardAfterAnEndEnv pays an agent after its end, which crashed RLlib's episodes through to_rllib.
@pytest.mark.parametrize("make", [TicTacToe, TeamRewardAfterAnEndEnv])
# RLlib registers its env wrapper with Gymnasium at every build: the second build in a process warns.
@pytest.mark.filterwarnings("ignore:.*Overriding environment rllib-multi-agent-env-v0 already in registry")
def test_rllib_ppo_runs_one_training_iteration_on_to_rllib_env(make: type) -> None:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    register_env("marl_bridges_test_env", lambda config: to_rllib(make(config)))
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # never a running cluster
    algo = None
    try:
        config = (
            PPOConfig()
            .environment("marl_bridges_test_env")
            .env_runners(num_env_runners=0, rollout_fragment_length=64)
            .learners(num_learners=0)
            .multi_agent(
                policies={"shared"},
                policy_mapping_fn=lambda agent_id, episode, **kwargs: "shared",
            )
            .rl_module(
                rl_module_spec=MultiRLModuleSpec(
                    rl_module_specs={"shared": RLModuleSpec(model_config=DefaultModelConfig(fcnet_hiddens=[16]))}
                )
            )
            .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
            .debugging(seed=0)
        )
        algo = config.build_algo()
        result = algo.train()
        learner = result["learners"]["shared"]
        assert result["training_iteration"] == 1
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 64
        assert "total_loss" in learner
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()
