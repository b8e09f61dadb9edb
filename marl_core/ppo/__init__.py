"""A multi-agent, multi-policy torch PPO trainer on Ray, configured like RLlib.

Example:
    >>> from marl_core.ppo import PPOConfig
    >>> config = (
    ...     PPOConfig()
    ...     .environment("marl_core.envs:RockPaperScissors")
    ...     .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
    ...     .training(train_batch_size=80, minibatch_size=40, num_epochs=1)
    ... )
    >>> algo = config.build()
    >>> result = algo.train()
    >>> result["num_env_steps_sampled"], sorted(result["policies"])
    (80, ['default_policy'])
    >>> algo.stop()

The names load on first use: ``PPO`` imports torch, Ray is imported only when env runners start,
and env runners of built-in models import neither torch nor the learner.
"""

from __future__ import annotations

from marl_core._lazy import lazy_exports

_EXPORTS = {
    "PPO": "marl_core.ppo.algorithm",
    "DEFAULT_MODEL": "marl_core.ppo.config",
    "DEFAULT_POLICY": "marl_core.ppo.config",
    "PolicySpec": "marl_core.ppo.config",
    "PPOConfig": "marl_core.ppo.config",
    "Episode": "marl_core.ppo.rollout",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
