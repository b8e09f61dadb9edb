"""A multi-agent, multi-policy torch PPO trainer on Ray, configured like RLlib.

Example:
    >>> from marl_core.ppo import PPOConfig
    >>> config = (
    ...     PPOConfig()
    ...     .environment("examples.rock_paper_scissors:RockPaperScissors")
    ...     .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
    ...     .training(train_batch_size=80, minibatch_size=40, num_epochs=1)
    ... )
    >>> algo = config.build()
    >>> result = algo.train()
    >>> result["num_env_steps_sampled"], sorted(result["policies"])
    (80, ['default_policy'])
    >>> algo.stop()

Importing this package imports torch; Ray is imported only when env runners start.
"""

from __future__ import annotations

from marl_core.ppo.algorithm import PPO
from marl_core.ppo.config import DEFAULT_MODEL, DEFAULT_POLICY, PolicySpec, PPOConfig
from marl_core.ppo.rollout import Episode

__all__ = ["DEFAULT_MODEL", "DEFAULT_POLICY", "PPO", "Episode", "PPOConfig", "PolicySpec"]
