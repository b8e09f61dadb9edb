"""Generalized advantage estimation over one agent's trajectory.

Example:
    >>> import numpy as np
    >>> from marl_core.ppo.gae import compute_gae
    >>> adv, ret = compute_gae(np.array([1.0, 1.0]), np.array([0.5, 0.5]), last_value=0.0,
    ...                        terminated=True, gamma=1.0, lambda_=1.0)
    >>> adv.tolist(), ret.tolist()
    ([1.5, 0.5], [2.0, 1.0])
"""

from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_value: float,
    terminated: bool,
    gamma: float,
    lambda_: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Advantages and value targets of one agent trajectory.

    Args:
        rewards: ``rewards[t]`` is everything credited to action ``t`` (accumulated until the
            agent's next action or the end).
        values: ``values[t]`` is V(observation at action ``t``).
        last_value: V of the observation after the last action: the final observation of a
            truncated episode, or the next observation when the trajectory is cut by the batch.
            Ignored when ``terminated``.
        terminated: the trajectory ends in a terminal state (no bootstrap).
        gamma: discount.
        lambda_: GAE lambda.

    Returns:
        ``(advantages, returns)`` with ``returns = advantages + values``, float32.
    """
    length = len(rewards)
    advantages = np.zeros(length, dtype=np.float32)
    next_value = 0.0 if terminated else float(last_value)
    running = 0.0
    for t in range(length - 1, -1, -1):
        delta = float(rewards[t]) + gamma * next_value - float(values[t])
        running = delta + gamma * lambda_ * running
        advantages[t] = running
        next_value = float(values[t])
    return advantages, advantages + np.asarray(values, dtype=np.float32)
