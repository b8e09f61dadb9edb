"""Time of ``check_env`` with its defaults, against the targets: < 1 s on RockPaperScissors, < 30 s on 20 agents.

Envs: the RLlib docs' RockPaperScissors (``marl_core.envs``, 2 agents); a
20-agent ``ManyAgentsEnv`` (image and Discrete observations from space overrides, 100 steps per
episode); 20 copies of CartPole (agents ending one by one); and PettingZoo's pistonball_v6 (20
pistons, 457x120x3 images, through ``bridges.wrap``) when PettingZoo is installed.

Next to each check, the same episodes are played plainly (``marl_core.rollout`` with random
actions: the explored episodes once and twice more for the determinism replays), alternating
with the checks in one process, so the ratio column (check time / plain play time) stays
meaningful on a loaded machine. The cpu column (process time of the check) hardly depends on
the load: it is what the check costs on an idle core.

Run: ``python bench/bench_check_env.py [--rounds 5] [--pistonball-rounds 1] [--no-pistonball]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ and tests/ live at the root

from marl_core import make_multi_agent, rollout
from marl_core._cli import number_arg
from marl_core.conformance import check_env
from marl_core.conformance.runner import DEFAULT_EPISODES, DEFAULT_MAX_STEPS
from marl_core.envs import RockPaperScissors
from tests.fixtures.envs import ManyAgentsEnv


def many_agents() -> ManyAgentsEnv:
    return ManyAgentsEnv({"num_agents": 20, "length": 100})


def cart_poles() -> Any:
    return make_multi_agent("CartPole-v1")({"num_agents": 20})


def pistonball() -> Any:
    from pettingzoo.butterfly import pistonball_v6

    return pistonball_v6.parallel_env()


def plain_play(factory: Callable[[], Any], episodes: int) -> float:
    """Seconds to play the checker's episodes (explored + 2 replays) without any checking."""
    import bridges

    started = time.perf_counter()
    env = bridges.wrap(factory())
    for _ in range(3):
        for index in range(episodes):
            rollout(env, seed=index, max_steps=1000)
    env.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=number_arg(int), default=5, help="alternating rounds per env (default 5)")
    parser.add_argument("--no-pistonball", action="store_true", help="leave pistonball_v6 out")
    parser.add_argument("--pistonball-rounds", type=number_arg(int), default=1, help="rounds for pistonball_v6 (default 1: it is slow)")
    args = parser.parse_args()
    cases: list[tuple[str, Callable[[], Any], int, float, int]] = [
        ("RockPaperScissors (seeds)", RockPaperScissors, 2, 1.0, args.rounds),
        ("ManyAgentsEnv, 100 steps", many_agents, 20, 30.0, args.rounds),
        ("CartPole x 20 (make_multi_agent)", cart_poles, 20, 30.0, args.rounds),
    ]
    if not args.no_pistonball:
        cases.append(("pistonball_v6 (bridges.wrap)", pistonball, 20, 30.0, args.pistonball_rounds))
    print(
        f"check_env defaults ({DEFAULT_EPISODES} episodes, max_steps {DEFAULT_MAX_STEPS}); machine shared "
        "with other work, so absolute times vary: the ratio is the steadier figure"
    )
    print(
        f"{'env':34} {'agents':>6} {'steps':>6} {'check s (median)':>17} {'min':>7} {'cpu s':>7} "
        f"{'plain s':>8} {'ratio':>6} {'target':>7} {'findings':>8}"
    )
    for name, factory, agents, target, rounds in cases:
        checks, cpus, plains, steps, found = [], [], [], 0, 0
        for _ in range(rounds):
            started, cpu = time.perf_counter(), time.process_time()
            report = check_env(factory)
            checks.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            steps, found = report.steps, len(report.findings)
            plains.append(plain_play(factory, report.episodes))
        check, plain = statistics.median(checks), statistics.median(plains)
        verdict = "ok" if check < target else "MISSED"
        print(
            f"{name:34} {agents:>6} {steps:>6} {check:>17.3f} {min(checks):>7.3f} {statistics.median(cpus):>7.3f} {plain:>8.3f} "
            f"{check / plain:>6.1f} {f'<{target:g} s':>7} {found:>8}  {verdict}"
        )


if __name__ == "__main__":
    main()
