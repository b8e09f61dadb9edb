"""Per-step cost of the PettingZoo bridges against the raw envs and RLlib's wrappers.

Run: ``python bench/bench_pettingzoo.py [--rounds 7] [--scale 1.0] [--only NAME ...]``

For each env, three loops play the same cheap policy (legal actions drawn from a pre-generated
pool, so the policy costs the same everywhere): PettingZoo's own loop on the raw env
(``agent_iter`` + ``last()`` for AEC, ``step(dict)`` for parallel), our bridge, and RLlib's
``PettingZooEnv`` / ``ParallelPettingZooEnv``. The bridged loops are the usual MultiAgentEnv loop
(act for every agent in the obs dict that has not ended). Within each round the loops run one
after the other in a rotating order, in one process, on the same seeds, so all three play the
same episodes with the same actions; time is process CPU time, which leaves out the time spent
waiting for a core on a loaded machine. The table shows the median over rounds of each loop's
time per step divided by the raw loop's in the same round. Steps count agent actions.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv

# name, defining module, kwargs, API, agent actions per timed run
ENVS: list[tuple[str, str, dict[str, Any], str, int]] = [
    ("connect_four_v3", "pettingzoo.classic.connect_four.connect_four", {}, "aec", 6000),
    ("tictactoe_v3", "pettingzoo.classic.tictactoe.tictactoe", {}, "aec", 6000),
    ("pistonball_v6", "pettingzoo.butterfly.pistonball.pistonball", {}, "aec", 1000),
    ("pistonball_v6", "pettingzoo.butterfly.pistonball.pistonball", {}, "parallel", 1000),
    ("simple_spread_v3", "mpe2.simple_spread_v3", {}, "aec", 4000),
    ("simple_spread_v3", "mpe2.simple_spread_v3", {}, "parallel", 4000),
]


class Picker:
    """Legal actions from a pre-generated pool: the same cheap policy for every loop."""

    def __init__(self, action_space_of: Callable[[str], Any], seed: int = 0) -> None:
        self.space_of = action_space_of
        self.rng = np.random.default_rng(seed)
        self.pools: dict[str, list[Any]] = {}
        self.draws = self.rng.integers(0, 1 << 30, 4096)
        self.i = 0

    def __call__(self, agent_id: str, observation: Any) -> Any:
        self.i = (self.i + 1) & 4095
        if type(observation) is dict and "action_mask" in observation:
            legal = np.flatnonzero(observation["action_mask"])
            return int(legal[self.draws[self.i] % len(legal)])
        pool = self.pools.get(agent_id)
        if pool is None:
            space = self.space_of(agent_id)
            space.seed(int(self.rng.integers(1 << 30)))
            pool = self.pools[agent_id] = [space.sample() for _ in range(512)]
        return pool[self.i & 511]


def raw_aec_loop(env: Any, steps: int, pick: Picker, seed: int) -> None:
    done = 0
    while done < steps:
        env.reset(seed=seed)
        seed += 1
        for agent_id in env.agent_iter():
            observation, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            env.step(pick(agent_id, observation))
            done += 1
            if done >= steps:
                return


def raw_parallel_loop(env: Any, steps: int, pick: Picker, seed: int) -> None:
    done = 0
    obs, _ = env.reset(seed=seed)
    while done < steps:
        actions = {agent_id: pick(agent_id, obs[agent_id]) for agent_id in env.agents}
        obs, _, _, _, _ = env.step(actions)
        done += len(actions)
        if not env.agents:
            seed += 1
            obs, _ = env.reset(seed=seed)


def multi_agent_loop(env: Any, steps: int, pick: Picker, seed: int) -> None:
    done = 0
    obs, _ = env.reset(seed=seed)
    terminateds: dict[str, bool] = {}
    truncateds: dict[str, bool] = {}
    while done < steps:
        actions = {
            agent_id: pick(agent_id, observation)
            for agent_id, observation in obs.items()
            if not (terminateds.get(agent_id) or truncateds.get(agent_id))
        }
        obs, _, terminateds, truncateds, _ = env.step(actions)
        done += len(actions)
        if terminateds.get("__all__") or truncateds.get("__all__") or not obs:
            seed += 1
            obs, _ = env.reset(seed=seed)
            terminateds, truncateds = {}, {}


def build(module: str, kwargs: dict[str, Any], api: str) -> Any:
    return getattr(importlib.import_module(module), "env" if api == "aec" else "parallel_env")(**kwargs)


def time_loop(loop: Callable[..., None], env: Any, steps: int, pick: Picker, seed: int) -> float:
    """CPU seconds per agent action (process time: time spent waiting for a core is left out)."""
    gc.collect()
    pick.i = 0
    start = time.process_time()
    loop(env, steps, pick, seed)
    return (time.process_time() - start) / steps


def bench_env(name: str, module: str, kwargs: dict[str, Any], api: str, steps: int, rounds: int) -> dict[str, Any]:
    from ray.rllib.env.wrappers import pettingzoo_env as rllib_pz

    raw_env = build(module, kwargs, api)
    raw_env.reset(seed=0)
    if api == "aec":
        ours: Any = PettingZooEnv(build(module, kwargs, api))
        theirs: Any = rllib_pz.PettingZooEnv(build(module, kwargs, api))
        raw_loop = raw_aec_loop
    else:
        ours = ParallelPettingZooEnv(build(module, kwargs, api))
        theirs = rllib_pz.ParallelPettingZooEnv(build(module, kwargs, api))
        raw_loop = raw_parallel_loop
    ours.reset(seed=0)
    theirs.reset(seed=0)
    loops = {
        "raw": (raw_loop, raw_env, Picker(raw_env.action_space)),
        "ours": (multi_agent_loop, ours, Picker(ours.get_action_space)),
        "rllib": (multi_agent_loop, theirs, Picker(raw_env.action_space)),
    }
    for loop, env, pick in loops.values():  # warm up: caches, pygame surfaces, lazy imports
        loop(env, max(steps // 10, 20), pick, 10_000)
    per_step: dict[str, list[float]] = {key: [] for key in loops}
    order = list(loops)
    for round_index in range(rounds):
        rotated = order[round_index % 3 :] + order[: round_index % 3]
        for key in rotated:
            loop, env, pick = loops[key]
            per_step[key].append(time_loop(loop, env, steps, pick, seed=round_index * 1000))
    ratios = {
        key: statistics.median(t / r for t, r in zip(per_step[key], per_step["raw"], strict=True)) for key in ("ours", "rllib")
    }
    best = {key: min(values) for key, values in per_step.items()}
    return {
        "env": f"{name} ({api})",
        "ours_best": best["ours"] / best["raw"],
        "rllib_best": best["rllib"] / best["raw"],
        "raw_us": statistics.median(per_step["raw"]) * 1e6,
        "ours_us": statistics.median(per_step["ours"]) * 1e6,
        "rllib_us": statistics.median(per_step["rllib"]) * 1e6,
        **{f"{key}_ratio": value for key, value in ratios.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per env (median reported)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the steps per timed run")
    parser.add_argument("--only", nargs="*", default=None, help="env names (substrings) to run")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = []
    for name, module, kwargs, api, steps in ENVS:
        if args.only and not any(part in f"{name} {api}" for part in args.only):
            continue
        rows.append(bench_env(name, module, kwargs, api, max(int(steps * args.scale), 20), args.rounds))
        row = rows[-1]
        print(f"  done {row['env']}", file=sys.stderr, flush=True)
    print(f"{args.rounds} rounds; us/step: median CPU time per agent action; ratios: median of per-round ratios")
    print("(best: ratio of the fastest round of each loop, the least disturbed by other processes)")
    print("| env | raw us/step | ours us/step | RLlib us/step | ours / raw | RLlib / raw | ours / raw (best) | RLlib / raw (best) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['env']} | {row['raw_us']:.1f} | {row['ours_us']:.1f} | {row['rllib_us']:.1f} | "
            f"{row['ours_ratio']:.3f}x | {row['rllib_ratio']:.3f}x | {row['ours_best']:.3f}x | {row['rllib_best']:.3f}x |"
        )


if __name__ == "__main__":
    main()
