"""PPO on structured action spaces: a Dict of Discrete, MultiBinary and integer Box actions.

The env is a one-step bandit: one agent observes which target it is shown (one of
``len(TARGETS)``, a Discrete observation) and picks a Dict action ``{"move": Discrete(3),
"bits": MultiBinary(4), "level": Box(0, 7, (), int64)}``; its reward is the fraction of the six
entries that equal the shown target's. Random play earns 0.41 on average. Each seed trains a fixed
number of iterations in the driver (no Ray); the table gives, after some of them, the greedy
action's share of right entries over every target (median and worst over seeds), and the mean
reward of the last 100 episodes (the trainer's window, sampled while exploring).

Usage::

    python bench/bench_structured_actions.py                  # after 1, 2, 5, 10 and 20 iterations, 3 seeds
    python bench/bench_structured_actions.py --at 1 2 3 --seeds 5
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
from marl_core.spaces import check_action

ACTION_SPACE = gym.spaces.Dict({"move": gym.spaces.Discrete(3), "bits": gym.spaces.MultiBinary(4),
                                "level": gym.spaces.Box(0, 7, (), np.int64)})
TARGETS = (
    {"move": 2, "bits": [1, 0, 1, 1], "level": 6},
    {"move": 0, "bits": [0, 1, 1, 0], "level": 1},
    {"move": 1, "bits": [1, 1, 0, 0], "level": 3},
)


def right_entries(action: dict[str, Any], target: dict[str, Any]) -> int:
    """How many of the six entries of ``action`` equal ``target``'s."""
    return (int(action["move"] == target["move"]) + int(np.sum(np.asarray(action["bits"]) == target["bits"]))
            + int(action["level"] == target["level"]))


class PickTarget(MultiAgentEnv):
    """One step: the share of the Dict action's entries that match the shown target is the reward."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = self.possible_agents = ["agent"]
        self.observation_spaces = {"agent": gym.spaces.Discrete(len(TARGETS))}
        self.action_spaces = {"agent": ACTION_SPACE}
        self.shown = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.shown = int(self.np_random.integers(len(TARGETS)))
        return {"agent": self.shown}, {}

    def step(self, action_dict):
        check_action("agent", ACTION_SPACE, action_dict["agent"])  # types, dtypes and shapes as the space says
        reward = right_entries(action_dict["agent"], TARGETS[self.shown]) / 6
        return {"agent": self.shown}, {"agent": reward}, {"agent": True, "__all__": True}, {"__all__": False}, {}


def train(seed: int, at: list[int]) -> list[tuple[float, float]]:
    """After each of the iterations in ``at``: (the greedy action's share of right entries over
    every target, the mean reward of the last 100 episodes)."""
    from marl_core.ppo import PPOConfig

    config = (PPOConfig().environment(PickTarget)
              .env_runners(num_env_runners=0, num_envs_per_env_runner=8)
              .training(lr=3e-3, train_batch_size=400, minibatch_size=200, num_epochs=4)
              .debugging(seed=seed))
    found = []
    with config.build() as algo:
        for iteration in range(1, max(at) + 1):
            result = algo.train()
            if iteration in at:
                right = sum(right_entries(algo.compute_single_action(shown), target)
                            for shown, target in enumerate(TARGETS))
                found.append((right / (6 * len(TARGETS)),
                              float(result["policies"]["default_policy"]["episode_return_mean"])))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", type=number_arg(int), nargs="+", default=[1, 2, 5, 10, 20],
                        help="training iterations after which to measure")
    parser.add_argument("--seeds", type=number_arg(int), default=3, help="seeds")
    args = parser.parse_args()
    at = sorted(set(args.at))
    start = time.monotonic()
    runs = [train(seed, at) for seed in range(args.seeds)]
    print(f"iterations of 400 env steps, {args.seeds} seeds; random play earns 0.41")
    print("| iterations | greedy share right, median | greedy share right, worst | mean reward, last 100 episodes, median |")
    print("|---|---|---|---|")
    for index, iterations in enumerate(at):
        shares, rewards = [run[index][0] for run in runs], [run[index][1] for run in runs]
        print(f"| {iterations} | {statistics.median(shares):.3f} | {min(shares):.3f} | {statistics.median(rewards):.3f} |")
    print(f"({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
