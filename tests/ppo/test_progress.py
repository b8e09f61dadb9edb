from __future__ import annotations

import csv

from marl_core.ppo.progress import RunLogger, flatten


def _result(iteration, **extra):
    return {"training_iteration": iteration, "num_env_steps_sampled_lifetime": 100 * iteration,
            "policies": {"main": {"episode_return_mean": 0.1 * iteration, "num_episodes": 3}}, **extra}


def test_entries_added_by_callbacks_become_columns_and_scalars(tmp_path):
    run_log = RunLogger(tmp_path)
    run_log.log(_result(1))
    run_log.log(_result(2, evaluation={"vs_random": {"win_rate": 0.75}, "note": "ok"}))
    run_log.log(_result(3))
    run_log.close()
    rows = list(csv.DictReader((tmp_path / "progress.csv").read_text().splitlines()))
    assert [row["training_iteration"] for row in rows] == ["1", "2", "3"]
    assert [row["evaluation/vs_random/win_rate"] for row in rows] == ["", "0.75", ""]
    assert rows[1]["evaluation/note"] == "ok"
    assert rows[2]["policies/main/episode_return_mean"] == str(0.1 * 3)
    assert any(path.name.startswith("events.out.tfevents") for path in (tmp_path / "tb").iterdir())
    png = run_log.plot()
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_flatten_keeps_numbers_and_strings_only():
    import numpy as np

    flat = flatten({"a": {"b": np.float32(1.5), "c": [1, 2]}, "d": "x", "e": True})
    assert flat == {"a/b": 1.5, "d": "x", "e": True}
