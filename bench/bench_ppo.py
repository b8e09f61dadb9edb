"""Our PPO vs RLlib's PPO on RLlib's own Connect-4 self-play example setup, side by side.

Both sides: OpenSpiel connect_four, policies "main" (learned) and "random" (uniform legal moves),
mapped by episode id parity as in RLlib's ``self_play_with_open_spiel.py``; one env runner; the
example's model (MLP 512x512, tanh, separate value net) and PPO settings (RLlib 2.60 defaults
with ``num_epochs=20``: lr 5e-5, train batch 4000, minibatch 128, gamma 0.99, lambda 1.0, clip
0.3, vf clip 10, the KL penalty (0.2, target 0.01), value loss weight 1.0 (our ``vf_coeff`` 2.0, as
our value loss is half the squared error), no entropy bonus). The example's SelfPlayCallback is left out on both sides (it
only adds frozen opponents; in RLlib it crashes its runner now and then).

Each configuration runs in a fresh subprocess; the parent samples the memory (PSS and RSS, summed
over the subprocess and all its descendants, Ray's processes included) every 0.5 s. RLlib runs two
ways: ``rllib`` drives ``algo.train()`` in the driver with Ray started as lean as ``ray.init``
allows (no dashboard, no log forwarding); ``rllib-tune`` runs it as its example script does,
``ray.init(num_cpus=...)`` and ``tune.Tuner``, which adds a trial actor holding a third torch
process.

Usage::

    python bench/bench_ppo.py --num-envs 1 8 --seconds 90            # all sides, alternating
    python bench/bench_ppo.py --side ours --num-envs 1 8 --seconds 60 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEARDOWN_GRACE_S = 30.0
HPARAMS = {"lr": 5e-5, "train_batch_size": 4000, "minibatch_size": 128, "num_epochs": 20, "gamma": 0.99,
           "lambda_": 1.0, "clip_param": 0.3, "vf_clip_param": 10.0, "entropy_coeff": 0.0}


# Shared by both sides ---------------------------------------------------------------------------


def connect_four_env(config: dict[str, Any]) -> Any:
    """Our OpenSpiel bridge on connect_four."""
    from bridges.openspiel import OpenSpielEnv

    return OpenSpielEnv("connect_four")


class RandomLegal:
    """Uniformly random legal moves from the observation's action mask."""

    def __init__(self, seed: int = 0) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)

    def __call__(self, observation: Any) -> int:
        import numpy as np

        legal = np.flatnonzero(observation["action_mask"])
        return int(legal[self.rng.integers(len(legal))])


def main_vs_random(agent_id: str, episode: Any, **kwargs: Any) -> str:
    """RLlib's example mapping: "main" plays player 0 in even episodes, player 1 in odd ones."""
    return "main" if episode.id_ % 2 == int(agent_id[-1]) else "random"


# One run in a subprocess --------------------------------------------------------------------------


def run_ours(num_envs: int, seconds: float, launch: float, torch_threads: int | None = None) -> dict[str, Any]:
    from marl_core.ppo import PPOConfig

    config = (
        PPOConfig()
        .environment(connect_four_env)
        .multi_agent(policies={"main": None, "random": RandomLegal(0)}, policy_mapping_fn=main_vs_random,
                     policies_to_train=["main"])
        .env_runners(num_env_runners=1, num_envs_per_env_runner=num_envs)
        .training(grad_clip=None, model={"hiddens": [512, 512], "activation": "tanh"}, **HPARAMS,
                  use_kl_loss=True, kl_coeff=0.2, kl_target=0.01, vf_coeff=2.0)  # RLlib's KL penalty and value weight
        .resources(num_cpus=2, torch_threads=torch_threads)
    )
    algo = config.build()
    rates, first = [], None
    try:
        while True:
            result = algo.train()
            if first is None:
                first = time.time() - launch
            else:
                rates.append(result["env_steps_per_s"])
            if time.time() - launch > seconds and len(rates) >= 2:
                break
    finally:
        algo.stop()
    return {"first_result_s": first, "rates": rates, "return": result["policies"]["main"]["episode_return_mean"]}


def _rllib_config(num_envs: int) -> Any:
    """RLlib's example config: its OpenSpiel wrapper, main vs its RandomRLModule, MLP 512x512."""
    import pyspiel
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.open_spiel import OpenSpielEnv
    from ray.rllib.examples.rl_modules.classes.random_rlm import RandomRLModule
    from ray.tune.registry import register_env

    register_env("open_spiel_env", lambda _: OpenSpielEnv(pyspiel.load_game("connect_four")))
    return (
        PPOConfig()
        .environment("open_spiel_env")
        .env_runners(num_env_runners=1, num_envs_per_env_runner=num_envs)
        .multi_agent(policies={"main", "random"},
                     policy_mapping_fn=lambda agent_id, episode, **kw: "main" if hash(episode.id_) % 2 == agent_id else "random",
                     policies_to_train=["main"])
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[512, 512]),
                   rl_module_spec=MultiRLModuleSpec(rl_module_specs={
                       "main": RLModuleSpec(), "random": RLModuleSpec(module_class=RandomRLModule)}))
        .training(num_epochs=20)
    )


def run_rllib(num_envs: int, seconds: float, launch: float) -> dict[str, Any]:
    """RLlib's algorithm driven directly, with Ray as lean as ``ray.init`` allows."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = _rllib_config(num_envs).build()
    rates, first, last = [], None, 0
    try:
        while True:
            start = time.time()
            result = algo.train()
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
            if first is None:
                first = time.time() - launch
            else:
                rates.append((steps - last) / (time.time() - start))
            last = steps
            if time.time() - launch > seconds and len(rates) >= 2:
                break
    finally:
        algo.stop()
        ray.shutdown()
    return {"first_result_s": first, "rates": rates, "return": None}


def run_rllib_tune(num_envs: int, seconds: float, launch: float, out: str) -> dict[str, Any]:
    """RLlib as its example script runs it: ``ray.init(num_cpus=...)`` and ``tune.Tuner``.

    The figures are written as soon as the trial ends: Tune's teardown has been seen to hang for
    minutes, and the parent stops the run once they are in.
    """
    import ray
    from ray import tune
    from ray.rllib.algorithms.ppo import PPO

    figures: dict[str, Any] = {"first_result_s": None, "rates": [], "return": None}

    class Record(tune.Callback):
        last_steps = 0

        def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
            steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
            if figures["first_result_s"] is None:
                figures["first_result_s"] = time.time() - launch
            else:
                figures["rates"].append((steps - self.last_steps) / result["time_this_iter_s"])
            self.last_steps = steps

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            Path(out).write_text(json.dumps(figures))

    ray.init(num_cpus=2)
    tune.Tuner(PPO, param_space=_rllib_config(num_envs), run_config=tune.RunConfig(
        stop={"time_total_s": seconds}, verbose=0, callbacks=[Record()],
        checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0, checkpoint_at_end=False))).fit()
    return figures


SIDES = ["ours", "rllib", "rllib-tune"]


# The parent: launch, watch memory, print the table -------------------------------------------------


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def _memory_mb(pid: int) -> tuple[float, float, int]:
    pss = rss = 0.0
    pids = _descendants(pid)
    for child in pids:
        try:
            with open(f"/proc/{child}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) / 1024
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1]) / 1024
        except OSError:
            continue
    return pss, rss, len(pids)


def measure(side: str, num_envs: int, seconds: float, torch_threads: int | None = None) -> dict[str, Any]:
    """Run one configuration in a subprocess; return its figures."""
    out_file = Path(f"/tmp/bench_ppo_{side}_{num_envs}_{os.getpid()}.json")
    command = [sys.executable, __file__, "--child", side, "--num-envs", str(num_envs), "--seconds", str(seconds),
               "--out", str(out_file)]
    if torch_threads is not None:
        command += ["--torch-threads", str(torch_threads)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_pss = peak_rss = 0.0
    peak_procs = 0
    written_at = None
    while process.poll() is None:
        pss, rss, procs = _memory_mb(process.pid)
        if pss > peak_pss:
            peak_pss, peak_rss, peak_procs = pss, rss, procs
        if written_at is None and out_file.exists():
            written_at = time.time()
        if written_at is not None and time.time() - written_at > TEARDOWN_GRACE_S:
            print(f"{side} x{num_envs}: figures in, teardown still running after {TEARDOWN_GRACE_S:.0f} s; "
                  "stopping it", file=sys.stderr, flush=True)
            for pid in reversed(_descendants(process.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
            break
        time.sleep(0.5)
    if written_at is None and process.returncode != 0:
        raise RuntimeError(f"{side} run failed:\n{process.stderr.read().decode()[-3000:]}")
    result = json.loads(out_file.read_text())
    out_file.unlink()
    return {**result, "peak_pss_mb": peak_pss, "peak_rss_mb": peak_rss, "processes": peak_procs}


def main() -> None:
    from marl_core._cli import number_arg  # here: the RLlib side's child imports nothing of ours

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", nargs="+", default=SIDES, choices=SIDES)
    parser.add_argument("--num-envs", nargs="+", type=number_arg(int), default=[1, 8])
    parser.add_argument("--seconds", type=number_arg(float), default=60.0, help="run length per configuration")
    parser.add_argument("--repeat", type=number_arg(int), default=1, help="rounds of all configurations")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch threads of our learner (default: torch's own, as RLlib's learner has)")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        launch = time.time()
        sys.path.insert(0, str(ROOT))
        if args.child == "rllib-tune":
            figures = run_rllib_tune(args.num_envs[0], args.seconds, launch, args.out)
        elif args.child == "ours":
            figures = run_ours(args.num_envs[0], args.seconds, launch, args.torch_threads)
        else:
            figures = run_rllib(args.num_envs[0], args.seconds, launch)
        Path(args.out).write_text(json.dumps(figures))
        return
    rows = []
    for repeat in range(args.repeat):  # the sides alternate, so both see the same machine load
        for num_envs in args.num_envs:
            for side in args.side:
                figures = measure(side, num_envs, args.seconds, args.torch_threads)
                rows.append((side, num_envs, figures))
                print(f"done: round {repeat + 1}, {side} x{num_envs}", file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    threads = "torch's default" if args.torch_threads is None else args.torch_threads
    print(f"\nConnect-4 self-play PPO, 1 env runner, {os.cpu_count()} CPUs, our learner's torch threads: {threads}, "
          f"load average {load:.1f} "
          f"(the machine is shared: absolute figures vary; compare rows of the same run)\n")
    print("| side | envs/runner | env steps/s (median) | iterations | first result (s) | peak PSS (MB) | peak RSS (MB) | processes |")
    print("|---|---|---|---|---|---|---|---|")
    rows.sort(key=lambda row: (row[1], row[0]))
    for side, num_envs, f in rows:
        median = statistics.median(f["rates"]) if f["rates"] else float("nan")
        print(f"| {side} | {num_envs} | {median:.0f} | {len(f['rates']) + 1} | {f['first_result_s']:.1f} | "
              f"{f['peak_pss_mb']:.0f} | {f['peak_rss_mb']:.0f} | {f['processes']} |")


if __name__ == "__main__":
    main()
