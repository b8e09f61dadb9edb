"""Pistonball with random actions through :class:`bridges.pettingzoo.PettingZooEnv`.

The seeds' first use of PettingZoo is the one-liner
``PettingZooEnv(pistonball_v6.env(num_floors=cfg.get("n_pistons", 20)))``. Two fixes: pistonball's
argument is ``n_pistons`` (``num_floors`` belongs to PettingZoo's retired prison env and makes
pistonball raise a TypeError), and the module is imported from where PettingZoo defines it, since
PettingZoo 1.27 deprecates importing ``pettingzoo.butterfly.pistonball_v6``.

Run: ``python examples/pistonball_random.py [--n-pistons 20] [--max-cycles 125] [--seed 0]``
plays one episode with uniformly random actions and prints each piston's return.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pettingzoo.butterfly.pistonball import pistonball as pistonball_v6

from bridges.pettingzoo import PettingZooEnv
from marl_core.rollout import EpisodeResult, rollout


def env_creator(config: dict[str, Any]) -> PettingZooEnv:
    """The seeds' creator, with pistonball's own argument names."""
    return PettingZooEnv(
        pistonball_v6.env(n_pistons=config.get("n_pistons", 20), max_cycles=config.get("max_cycles", 125))
    )


def play_random(n_pistons: int = 20, max_cycles: int = 125, seed: int = 0) -> EpisodeResult:
    """One episode of pistonball with random actions (seeded by ``seed``)."""
    env = env_creator({"n_pistons": n_pistons, "max_cycles": max_cycles})
    try:
        return rollout(env, seed=seed)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Pistonball with random actions through PettingZooEnv.")
    parser.add_argument("--n-pistons", type=int, default=20)
    parser.add_argument("--max-cycles", type=int, default=125)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = play_random(args.n_pistons, args.max_cycles, args.seed)
    seconds = time.perf_counter() - start
    ending = "terminated" if result.terminated else "truncated"
    print(f"pistonball_v6, {args.n_pistons} pistons: {result.steps} steps in {seconds:.1f} s, {ending}")
    for agent_id in result.agents_seen:
        print(f"  {agent_id:>10}: {result.lengths[agent_id]:4d} actions, return {result.returns.get(agent_id, 0.0):8.3f}")


if __name__ == "__main__":
    main()
