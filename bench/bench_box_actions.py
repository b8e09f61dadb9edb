"""PPO on Box actions of different widths, with ``normalize_actions`` on (RLlib's default) and off.

The env is a one-step bandit: one agent, an action in ``Box(low, high, (2,))``, a reward of minus
the mean distance to a target at 70% and 20% of the range, as a fraction of the width. Each
configuration trains a fixed number of iterations in the driver (no Ray) from several seeds; the
table gives the greedy action's distance to the target at the end, as a fraction of the width
(median and worst over seeds), and the mean reward of the last 100 episodes (the trainer's window).

Usage::

    python bench/bench_box_actions.py                        # 4 widths x on/off x 3 seeds
    python bench/bench_box_actions.py --iterations 80 --seeds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from marl_core import MultiAgentEnv
from marl_core._cli import number_arg

WIDTHS = ((-1.0, 1.0), (0.0, 1.0), (0.0, 100.0), (-500.0, 500.0))
TARGET_FRACTIONS = np.array([0.7, 0.2])


class TargetBox(MultiAgentEnv):
    """One step: the action's mean distance to the target, as a fraction of the width, is the cost."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        low, high = (config or {}).get("bounds", (-1.0, 1.0))
        self.low, self.high = float(low), float(high)
        self.target = self.low + TARGET_FRACTIONS * (self.high - self.low)
        self.agents = self.possible_agents = ["agent"]
        self.observation_spaces = {"agent": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        self.action_spaces = {"agent": gym.spaces.Box(self.low, self.high, (2,), np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return {"agent": np.zeros(2, np.float32)}, {}

    def step(self, action_dict):
        error = float(np.abs(np.asarray(action_dict["agent"], np.float64) - self.target).mean())
        return ({"agent": np.zeros(2, np.float32)}, {"agent": -error / (self.high - self.low)},
                {"agent": True, "__all__": True}, {"__all__": False}, {})


def train(bounds: tuple[float, float], normalize: bool, seed: int, iterations: int) -> tuple[float, float]:
    """(greedy action's distance to the target / width, mean reward of the last 100 episodes)."""
    from marl_core.ppo import PPOConfig

    config = (PPOConfig().environment(TargetBox, env_config={"bounds": bounds}, normalize_actions=normalize)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
              .training(lr=3e-3, train_batch_size=400, minibatch_size=200, num_epochs=4)
              .debugging(seed=seed))
    env = TargetBox({"bounds": bounds})
    with config.build() as algo:
        for _ in range(iterations):
            result = algo.train()
        greedy = np.asarray(algo.compute_actions({"agent": np.zeros(2, np.float32)})["agent"], np.float64)
    error = float(np.abs(greedy - env.target).mean()) / (env.high - env.low)
    return error, float(result["policies"]["default_policy"]["episode_return_mean"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=number_arg(int), default=40, help="training iterations per run")
    parser.add_argument("--seeds", type=number_arg(int), default=3, help="seeds per configuration")
    args = parser.parse_args()
    start = time.monotonic()
    print(f"{args.iterations} iterations of 400 env steps, {args.seeds} seeds; error: |greedy - target| / width")
    print("| action bounds | normalize_actions | error, median | error, worst | mean reward, last 100 episodes, median |")
    print("|---|---|---|---|---|")
    for bounds in WIDTHS:
        for normalize in (True, False):
            runs = [train(bounds, normalize, seed, args.iterations) for seed in range(args.seeds)]
            errors, rewards = [e for e, _ in runs], [r for _, r in runs]
            print(f"| [{bounds[0]:g}, {bounds[1]:g}] | {normalize} | {statistics.median(errors):.3f} | "
                  f"{max(errors):.3f} | {statistics.median(rewards):.3f} |", flush=True)
    print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
