"""Per-step cost of the PettingZoo bridges against the raw envs and RLlib's wrappers.

Run: ``python bench/bench_pettingzoo.py [--rounds 9] [--scale 1.0] [--only NAME ...] [--control] [--floor] [--overhead]``

For each env, three loops play the same cheap policy (legal actions drawn from a pre-generated
pool, so the policy costs the same everywhere): PettingZoo's own loop on the raw env
(``agent_iter`` + ``last()`` for AEC, ``step(dict)`` for parallel), our bridge, and RLlib's
``PettingZooEnv`` / ``ParallelPettingZooEnv``. The bridged loops are the usual MultiAgentEnv loop
(act for every agent in the obs dict that has not ended). All three loops drive one and the same
env instance (each loop starts from ``reset(seed=...)``), so differences between instances (memory
layout, caches, render surfaces) cannot pass for bridge overhead. Within each round the loops run
one after the other in a rotating order, in one process, on the same seeds, so all three play the
same episodes with the same actions; time is process CPU time, which leaves out the time spent
waiting for a core on a loaded machine. Objects alive before timing are frozen out of the garbage
collector, so a full collection of the interpreter's heap lands in no loop.

The table shows, per loop, the median over rounds of its time per step divided by the raw loop's
in the same round, with the smallest and largest of those per-round ratios; ``--control`` adds a
second raw loop on the same env, whose ratio to the first shows how far two identical loops drift
apart (the noise floor). ``--floor`` adds, for the parallel envs, :class:`FloorParallelBridge`: the
least a parallel bridge can do and still check every action before the env sees it and leave the
env's dicts unchanged (what RLlib's wrapper skips), so its ratio is the lowest a bridge with those
two duties can reach. ``--overhead`` adds a second table for the parallel envs: the time each
bridge spends in its own ``step()`` outside the env's, timed directly at every step (see
:func:`bridge_overhead`).
Steps count agent actions.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv
from marl_core._cli import number_arg

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


class FloorParallelBridge:
    """The least work a parallel bridge can do with two duties RLlib's wrapper skips.

    It checks every action's type and bounds before the env sees it, and returns new
    terminated/truncated dicts with ``"__all__"`` instead of writing into the env's. Nothing
    else: no agents added or removed, no masks, no error messages. Timing only, not a bridge.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.checks = {agent_id: self._check_of(env.action_space(agent_id)) for agent_id in env.possible_agents}

    @staticmethod
    def _check_of(space: Any) -> Callable[[Any], bool]:
        if isinstance(space, gymnasium.spaces.Discrete):
            low, high = int(space.start), int(space.start + space.n)
            ints = (int, np.int64, np.int32)
            return lambda action: type(action) in ints and low <= action < high
        shape, dtype, low, high = space.shape, space.dtype, space.low, space.high
        return lambda action: (
            type(action) is np.ndarray and action.shape == shape and action.dtype == dtype
            and bool((action >= low).all() and (action <= high).all())
        )

    def reset(self, *, seed: int | None = None) -> Any:
        return self.env.reset(seed=seed)

    def step(self, action_dict: dict[str, Any]) -> Any:
        checks = self.checks
        for agent_id, action in action_dict.items():
            if not checks[agent_id](action):
                raise ValueError(f"{agent_id}: {action!r} is not in its action space")
        obs, rewards, terms, truncs, infos = self.env.step(action_dict)
        terminateds = dict(terms)
        terminateds["__all__"] = all(terms.values())
        truncateds = dict(truncs)
        truncateds["__all__"] = all(truncs.values())
        return obs, rewards, terminateds, truncateds, infos


def build(module: str, kwargs: dict[str, Any], api: str) -> Any:
    return getattr(importlib.import_module(module), "env" if api == "aec" else "parallel_env")(**kwargs)


def time_loop(loop: Callable[..., None], env: Any, steps: int, pick: Picker, seed: int) -> float:
    """CPU seconds per agent action (process time: time spent waiting for a core is left out)."""
    gc.collect()
    pick.i = 0
    start = time.process_time()
    loop(env, steps, pick, seed)
    return (time.process_time() - start) / steps


class Stopwatch:
    """Times each call of the methods it wraps (instance attributes shadow them).

    ``ns`` adds up the wall time of every call; with an ``inner`` stopwatch, ``own`` also keeps,
    for each call, its time minus the time spent meanwhile inside ``inner``'s methods, per entry
    of the call's first argument (per agent action, for a ``step(action_dict)``).
    """

    def __init__(self, inner: Stopwatch | None = None) -> None:
        self.ns = 0
        self.inner = inner
        self.own: list[float] = []

    def wrap(self, obj: Any, name: str) -> None:
        method = getattr(obj, name)
        inner = self.inner

        def timed(*args: Any, **kwargs: Any) -> Any:
            inner_before = inner.ns if inner is not None else 0
            start = time.perf_counter_ns()
            try:
                return method(*args, **kwargs)
            finally:
                spent = time.perf_counter_ns() - start
                self.ns += spent
                if inner is not None:
                    self.own.append((spent - (inner.ns - inner_before)) / len(args[0]))

        setattr(obj, name, timed)

    def unwrap(self, obj: Any, name: str) -> None:
        delattr(obj, name)


def bridge_overhead(module: str, kwargs: dict[str, Any], steps: int, rounds: int) -> dict[str, float]:
    """Microseconds per agent action that each parallel bridge's ``step()`` spends outside the env's.

    For each call of the bridge's ``step()``: its time minus the time inside the env's
    ``step()``, per agent action; the median over the steps of a round, then the median over
    rounds. Same env instance, the two bridges alternating. This measures the bridge's own work
    directly instead of as the small difference of two totals. It is wall time, so the median
    over steps keeps out the steps that a loaded machine cut with another process (a mean would
    take them in). (AEC bridges are left out: their step does the reads that PettingZoo's own
    loop does in ``last()`` and ``agent_iter()``, so time outside ``env.step()`` is not overhead.)
    """
    from ray.rllib.env.wrappers import pettingzoo_env as rllib_pz

    env = build(module, kwargs, "parallel")
    inner = Stopwatch()
    inner.wrap(env, "step")
    bridges = {"ours": ParallelPettingZooEnv(env), "rllib": rllib_pz.ParallelPettingZooEnv(env)}
    outer = {key: Stopwatch(inner) for key in bridges}
    for key, bridge in bridges.items():
        outer[key].wrap(bridge, "step")
    picks = {key: Picker(env.action_space) for key in bridges}
    for key, bridge in bridges.items():
        multi_agent_loop(bridge, max(steps // 10, 20), picks[key], 10_000)
    result: dict[str, list[float]] = {key: [] for key in bridges}
    for round_index in range(rounds):
        for key in list(bridges)[round_index % 2 :] + list(bridges)[: round_index % 2]:
            outer[key].own.clear()
            picks[key].i = 0
            multi_agent_loop(bridges[key], steps, picks[key], round_index * 1000)
            result[key].append(statistics.median(outer[key].own) / 1e3)
    inner.unwrap(env, "step")
    return {key: statistics.median(values) for key, values in result.items()}


def bench_env(
    name: str, module: str, kwargs: dict[str, Any], api: str, steps: int, rounds: int, control: bool,
    floor: bool = False,
) -> dict[str, Any]:
    from ray.rllib.env.wrappers import pettingzoo_env as rllib_pz

    raw_env = build(module, kwargs, api)
    if api == "aec":
        ours: Any = PettingZooEnv(raw_env)
        theirs: Any = rllib_pz.PettingZooEnv(raw_env)
        raw_loop = raw_aec_loop
    else:
        ours = ParallelPettingZooEnv(raw_env)
        theirs = rllib_pz.ParallelPettingZooEnv(raw_env)
        raw_loop = raw_parallel_loop
    loops = {
        "raw": (raw_loop, raw_env, Picker(raw_env.action_space)),
        "ours": (multi_agent_loop, ours, Picker(ours.get_action_space)),
        "rllib": (multi_agent_loop, theirs, Picker(raw_env.action_space)),
    }
    if floor and api == "parallel":
        loops["floor"] = (multi_agent_loop, FloorParallelBridge(raw_env), Picker(raw_env.action_space))
    if control:
        loops["control"] = (raw_loop, raw_env, Picker(raw_env.action_space))
    for loop, env, pick in loops.values():  # warm up: caches, pygame surfaces, lazy imports
        loop(env, max(steps // 10, 20), pick, 10_000)
    gc.collect()
    gc.freeze()
    per_step: dict[str, list[float]] = {key: [] for key in loops}
    order = list(loops)
    for round_index in range(rounds):
        shift = round_index % len(order)
        for key in order[shift:] + order[:shift]:
            loop, env, pick = loops[key]
            per_step[key].append(time_loop(loop, env, steps, pick, seed=round_index * 1000))
    gc.unfreeze()
    row: dict[str, Any] = {"env": f"{name} ({api})"}
    best_raw = min(per_step["raw"])
    for key, values in per_step.items():
        ratios = [t / r for t, r in zip(values, per_step["raw"], strict=True)]
        row[f"{key}_us"] = statistics.median(values) * 1e6
        row[f"{key}_ratio"] = statistics.median(ratios)
        row[f"{key}_min"], row[f"{key}_max"] = min(ratios), max(ratios)
        row[f"{key}_best"] = min(values) / best_raw
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=number_arg(int), default=9, help="timed rounds per env (median reported)")
    parser.add_argument("--scale", type=number_arg(float), default=1.0, help="multiply the steps per timed run")
    parser.add_argument("--only", nargs="*", default=None, help="env names (substrings) to run")
    parser.add_argument("--control", action="store_true", help="add a second raw loop: the noise floor")
    parser.add_argument(
        "--floor", action="store_true", help="add the least bridge that checks actions and copies (parallel envs)"
    )
    parser.add_argument(
        "--overhead", action="store_true", help="also time each bridge's own work inside step() directly"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    load_start = os.getloadavg()
    rows = []
    for name, module, kwargs, api, steps in ENVS:
        if args.only and not any(part in f"{name} {api}" for part in args.only):
            continue
        rows.append(
            bench_env(name, module, kwargs, api, max(int(steps * args.scale), 20), args.rounds, args.control, args.floor)
        )
        row = rows[-1]
        if args.overhead and api == "parallel":
            row["overhead"] = bridge_overhead(module, kwargs, max(int(steps * args.scale), 20), args.rounds)
        print(f"  done {row['env']}", file=sys.stderr, flush=True)
    load_end = os.getloadavg()
    print(
        f"{args.rounds} rounds; load average (1, 5, 15 min) at start {load_start[0]:.2f} {load_start[1]:.2f} "
        f"{load_start[2]:.2f}, at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}"
    )
    print("us/step: median CPU time per agent action; x: median of per-round ratios to raw [smallest, largest]")
    print("(best: ratio of the fastest round of each loop, the least disturbed by other processes)")
    keys = ["ours", "rllib"] + (["floor"] if args.floor else []) + (["control"] if args.control else [])
    names = {"ours": "ours", "rllib": "RLlib", "floor": "floor", "control": "raw again"}
    print(
        "| env | raw us/step | ours us/step | RLlib us/step | "
        + " | ".join(f"{names[k]} / raw" for k in keys)
        + " | "
        + " | ".join(f"{names[k]} / raw (best)" for k in keys)
        + " |"
    )
    print("|---|---:|---:|---:|" + "---:|" * (2 * len(keys)))
    for row in rows:
        cells = [f"{row['raw_us']:.1f}", f"{row['ours_us']:.1f}", f"{row['rllib_us']:.1f}"]
        cells += [
            f"{row[k + '_ratio']:.3f}x [{row[k + '_min']:.3f}, {row[k + '_max']:.3f}]" if k + "_ratio" in row else "-"
            for k in keys
        ]
        cells += [f"{row[k + '_best']:.3f}x" if k + "_best" in row else "-" for k in keys]
        print(f"| {row['env']} | " + " | ".join(cells) + " |")
    if args.overhead:
        print()
        print(
            "Parallel bridges' own work per agent action (wall time in step() outside env.step(); "
            "median over steps, then over rounds):"
        )
        print("| env | ours us | RLlib us | ours % of raw step | RLlib % of raw step |")
        print("|---|---:|---:|---:|---:|")
        for row in rows:
            if "overhead" not in row:
                continue
            ours, theirs = row["overhead"]["ours"], row["overhead"]["rllib"]
            raw = row["raw_us"]
            print(
                f"| {row['env']} | {ours:.2f} | {theirs:.2f} | {100 * ours / raw:.2f}% | {100 * theirs / raw:.2f}% |"
            )


if __name__ == "__main__":
    main()
