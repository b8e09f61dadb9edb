"""Pistonball with parameter sharing: every piston uses one CNN policy (PettingZoo's tutorial setup).

The env is PettingZoo's ``pistonball_v6`` (parallel API) preprocessed with SuperSuit as in the
PettingZoo docs: grayscale, resized to 84x84, 3 frames stacked, so each piston sees a uint8
84x84x3 image and the trainer picks a CNN. It reaches the trainer through
:class:`bridges.pettingzoo.ParallelPettingZooEnv`; one policy, ``"shared"``, acts for all pistons.

The defaults are sized so that a run on a 2-core laptop shows learning within minutes: 10 pistons
(PettingZoo's default is 20; ``--n-pistons 20``) with discrete moves (down, stay, up;
``--continuous`` for PettingZoo's continuous default), sampling in this process and a small CNN
(see :func:`marl_core.ppo.presets.pistonball_config`). Every piston gets the same reward: 100
times the share of the ball's starting distance to the left wall covered in the step, minus 0.1
per step, so an episode's return is about 100 when the ball reaches the wall.

Run: ``python examples/pistonball_ppo.py --minutes 24 --out runs/pistonball`` writes
``progress.csv``, TensorBoard logs and ``learning_curve.png`` into ``--out``
(``marl-train pistonball`` does the same with checkpoints and a progress bar).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from marl_core.ppo import PPOConfig
from marl_core.ppo.presets import PISTONBALL_ENV_CONFIG, pistonball_config
from marl_core.ppo.progress import RunLogger


def build_config(n_pistons: int = 10, max_cycles: int = 125, num_env_runners: int = 0,
                 continuous: bool = False) -> PPOConfig:
    """Pistonball with ``n_pistons`` sharing one policy (see :func:`marl_core.ppo.presets.pistonball_config`)."""
    return (
        pistonball_config()
        .environment(env_config={"n_pistons": n_pistons, "max_cycles": max_cycles, "continuous": continuous})
        .env_runners(num_env_runners=num_env_runners)
    )


def train(config: PPOConfig, out: Path, minutes: float | None = None, iterations: int | None = None,
          verbose: bool = True) -> list[dict]:
    """Train until the time or iteration budget runs out; log to ``out``; return the results."""
    deadline = time.monotonic() + 60 * minutes if minutes is not None else float("inf")
    run_log = RunLogger(out)
    results = []
    with config.build() as algo:
        # At least one iteration, however much of the budget Ray's start-up took.
        while (not results or time.monotonic() < deadline) and (iterations is None or len(results) < iterations):
            result = algo.train()
            results.append(result)
            run_log.log(result)
            if verbose:
                shared = result["policies"]["shared"]
                print(f"iteration {result['training_iteration']}: return {shared['episode_return_mean']:.2f}, "
                      f"{result['env_steps_per_s']:.1f} env steps/s", flush=True)
        algo.save(out / "final")
    run_log.close()
    run_log.plot(title="pistonball, shared CNN policy")
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=24.0)
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--n-pistons", type=int, default=PISTONBALL_ENV_CONFIG["n_pistons"])
    parser.add_argument("--max-cycles", type=int, default=PISTONBALL_ENV_CONFIG["max_cycles"])
    parser.add_argument("--continuous", action="store_true", help="PettingZoo's continuous moves in [-1, 1]")
    parser.add_argument("--runners", type=int, default=0, help="Ray env runners (0: sample in this process)")
    parser.add_argument("--out", type=Path, default=Path("runs/pistonball"))
    args = parser.parse_args(argv)
    config = build_config(args.n_pistons, args.max_cycles, args.runners, args.continuous)
    train(config, args.out, args.minutes, args.iterations)
    print(f"learning curve: {args.out / 'learning_curve.png'}")


if __name__ == "__main__":
    main()
