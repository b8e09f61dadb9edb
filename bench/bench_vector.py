"""Env steps per second of VectorMultiAgentEnv: sync vs async, on pistonball and connect_four_v3.

Both envs go through the PettingZoo bridge (pistonball_v6 as a ParallelPettingZooEnv,
connect_four_v3 as a PettingZooEnv); actions are random and legal, drawn the same way in every
mode. The loops are measured in alternating rounds in one process, so a change in machine load
hits every mode alike.

On a busy Linux machine with autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``),
CPU time is shared between sessions, not processes: while other sessions keep every core busy,
the async workers get no more CPU than the sync loop would, so the measured ratio then shows
overhead, not parallelism. The CPU columns (main process, and all workers together, per env
step) hardly depend on the load; from them, the last column estimates the async speed-up with a
free core per worker: a vector step costs ``main x envs`` in the main process, then ``workers x
envs / num_workers`` in parallel, against ``sync x envs`` for the sync loop.

Run: ``python bench/bench_vector.py [--envs 2] [--rounds 5] [--seconds 2]``
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

from marl_core._cli import number_arg
from marl_core.env import MultiAgentEnv
from marl_core.spaces import action_mask_of
from marl_core.vector import VectorMultiAgentEnv


def pistonball() -> MultiAgentEnv:
    from pettingzoo.butterfly.pistonball import pistonball as module

    from bridges.pettingzoo import ParallelPettingZooEnv

    return ParallelPettingZooEnv(module.parallel_env())


def connect_four() -> MultiAgentEnv:
    from pettingzoo.classic.connect_four import connect_four as module

    from bridges.pettingzoo import PettingZooEnv

    return PettingZooEnv(module.env())


class FastRandom:
    """Seeded random legal actions at a small, equal cost in every loop (Box and Discrete only)."""

    def __init__(self, env: MultiAgentEnv, seed: int) -> None:
        self.env = env
        self.rng = np.random.default_rng(seed)
        self.spaces: dict[str, gym.Space] = {}

    def __call__(self, agent_id: str, observation: object) -> object:
        space = self.spaces.get(agent_id) or self.spaces.setdefault(agent_id, self.env.get_action_space(agent_id))
        if isinstance(space, gym.spaces.Box):
            return self.rng.uniform(space.low, space.high).astype(space.dtype)
        mask = action_mask_of(observation)
        if mask is None:
            return np.int64(space.start + self.rng.integers(space.n))
        return np.int64(space.start + self.rng.choice(np.flatnonzero(mask)))


class Loop:
    """One way of stepping ``num_envs`` envs; ``run(seconds)`` returns env steps done and time."""

    def __init__(
        self,
        name: str,
        factory: Callable[[], MultiAgentEnv],
        num_envs: int,
        mode: str | None,
        num_workers: int | None = None,
    ) -> None:
        self.name = name
        self.num_envs = num_envs if mode else 1
        self.policies = [FastRandom(factory(), seed=i) for i in range(self.num_envs)]
        if mode is None:
            self.env: MultiAgentEnv | None = factory()
            self.vector: VectorMultiAgentEnv | None = None
            self.obs, _ = self.env.reset(seed=0)
            self.acting = list(self.obs)
        else:
            self.env = None
            self.vector = VectorMultiAgentEnv([factory] * num_envs, mode, num_workers=num_workers)  # type: ignore[arg-type]
            self.obs_list, _ = self.vector.reset(seed=0)
        self.steps = 0
        self.seconds = 0.0
        self.main_cpu = 0.0
        self.worker_cpu = 0.0

    def _worker_cpu(self) -> float:
        """CPU seconds used so far by the async workers (Linux /proc; 0 elsewhere)."""
        if self.vector is None or self.vector._workers is None:
            return 0.0
        total = 0.0
        for pid in self.vector._workers.pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                return 0.0
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def run(self, seconds: float) -> None:
        cpu, worker_cpu = time.process_time(), self._worker_cpu()
        start = time.perf_counter()
        steps = 0
        while time.perf_counter() - start < seconds:
            if self.vector is not None:
                actions = [
                    {a: self.policies[i](a, self.obs_list[i][a]) for a in acting}
                    for i, acting in enumerate(self.vector.acting)
                ]
                self.obs_list = self.vector.step(actions)[0]
                steps += self.num_envs
            elif self.env is not None:
                actions = {a: self.policies[0](a, self.obs[a]) for a in self.acting}
                self.obs, _, terminateds, truncateds, _ = self.env.step(actions)
                if terminateds.get("__all__") or truncateds.get("__all__"):
                    self.obs, _ = self.env.reset()
                    self.acting = list(self.obs)
                else:
                    self.acting = [a for a in self.obs if not (terminateds.get(a) or truncateds.get(a))]
                steps += 1
        self.seconds += time.perf_counter() - start
        self.steps += steps
        self.main_cpu += time.process_time() - cpu
        self.worker_cpu += self._worker_cpu() - worker_cpu

    def close(self) -> None:
        if self.vector is not None:
            self.vector.close()
        if self.env is not None:
            self.env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=number_arg(int), default=2, help="envs (and async workers) per vector")
    parser.add_argument("--many", type=number_arg(int, inclusive=True), default=16, help="also run this many envs in --envs workers (0: skip)")
    parser.add_argument("--rounds", type=number_arg(int), default=5, help="alternating rounds per loop")
    parser.add_argument("--seconds", type=number_arg(float), default=2.0, help="seconds per loop per round")
    parser.add_argument("--only", choices=["pistonball", "connect_four"], help="benchmark one env only")
    args = parser.parse_args()
    envs = {"pistonball_v6": pistonball, "connect_four_v3": connect_four}
    if args.only:
        envs = {name: f for name, f in envs.items() if name.startswith(args.only)}
    rows = []
    for env_name, factory in envs.items():
        loops = [
            Loop("one env, no vector", factory, args.envs, None),
            Loop(f"sync x{args.envs}", factory, args.envs, "sync"),
            Loop(f"async x{args.envs}, {args.envs} workers", factory, args.envs, "async"),
        ]
        if args.many:
            loops.append(Loop(f"sync x{args.many}", factory, args.many, "sync"))
            loops.append(Loop(f"async x{args.many}, {args.envs} workers", factory, args.many, "async", args.envs))
        try:
            for loop in loops:  # warm-up
                loop.run(min(0.5, args.seconds))
                loop.steps, loop.seconds, loop.main_cpu, loop.worker_cpu = 0, 0.0, 0.0, 0.0
            for _ in range(args.rounds):
                for loop in loops:
                    loop.run(args.seconds)
        finally:
            for loop in loops:
                loop.close()
        syncs = {loop.num_envs: loop for loop in loops if loop.name.startswith("sync")}
        syncs[1] = syncs[args.envs]
        for loop in loops:
            rate = loop.steps / loop.seconds
            sync = syncs[loop.num_envs]
            main_ms = 1000 * loop.main_cpu / loop.steps
            worker_ms = 1000 * loop.worker_cpu / loop.steps
            estimate = "-"
            if loop.vector is not None and loop.vector.mode == "async":
                workers = len(loop.vector._workers.pids)  # type: ignore[union-attr]
                sync_ms = 1000 * sync.main_cpu / sync.steps
                estimate = f"{sync_ms / (main_ms + worker_ms / workers):.2f}x"
            ratio = rate / (sync.steps / sync.seconds)
            rows.append((env_name, loop.name, loop.steps, rate, ratio, main_ms, worker_ms, estimate))
    print("| env | loop | env steps | env steps/s | vs sync, same envs | CPU ms/env step: main | workers | idle estimate |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for env_name, name, steps, rate, ratio, main_ms, worker_ms, estimate in rows:
        print(f"| {env_name} | {name} | {steps} | {rate:,.1f} | {ratio:.2f}x | {main_ms:.3f} | {worker_ms:.3f} | {estimate} |")
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    scheduling = f", autogroup scheduling {autogroup.read_text().strip()}" if autogroup.exists() else ""
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs{scheduling}")


if __name__ == "__main__":
    main()
