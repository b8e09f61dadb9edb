"""The benchmark scripts: what they count, and their arguments checked before anything runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from shimmy import OpenSpielCompatibilityV0

ROOT = Path(__file__).resolve().parents[2]


def _bench_module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shimmy_loop_counts_one_step_per_joint_action(monkeypatch):
    # It counted one per player's AEC step: goofspiel's Shimmy figure was per half decision.
    actions = []
    step = OpenSpielCompatibilityV0.step
    monkeypatch.setattr(OpenSpielCompatibilityV0, "step",
                        lambda self, action: (actions.append(action), step(self, action))[1])
    steps = _bench_module("bench_openspiel").shimmy_loop("goofspiel")(40, 0)
    played = [action for action in actions if action is not None]  # two players' AEC steps per decision
    assert steps >= 40 and len(played) == 2 * steps


@pytest.mark.slow  # each script imports its libraries first: a few seconds apiece
@pytest.mark.parametrize(("script", "arguments", "message"), [
    ("bench_check_env", ["--rounds", "0"], "argument --rounds: expected an integer above 0, received '0'"),
    ("bench_openspiel", ["--steps", "-5"], "argument --steps: expected an integer above 0, received '-5'"),
    ("bench_pettingzoo", ["--scale", "0"], "argument --scale: expected a number above 0, received '0'"),
    ("bench_vector", ["--seconds", "nan"], "argument --seconds: expected a number above 0, received 'nan'"),
    ("bench_ppo", ["--num-envs", "0"], "argument --num-envs: expected an integer above 0, received '0'"),
    ("bench_box_actions", ["--seeds", "0"], "argument --seeds: expected an integer above 0, received '0'"),
    ("bench_structured_actions", ["--at", "5", "0"], "argument --at: expected an integer above 0, received '0'"),
    ("bench_connect4", ["--games", "bogus=3"], "argument --games: 'bogus=3': expected OPPONENT=GAMES"),
    ("bench_connect4", ["--at", "0,1"], "argument --at: expected minutes above 0, received '0,1'"),
])
def test_bad_arguments_are_usage_errors_before_anything_runs(script, arguments, message):
    # Each was a traceback (an empty median, a division by zero), some only after training.
    done = subprocess.run([sys.executable, f"bench/{script}.py", *arguments], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 2 and message in done.stderr, done.stderr
