from __future__ import annotations

import csv

import pytest

from marl_core.errors import RunLogError
from marl_core.ppo.progress import RunLogger, flatten, write_atomic


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


def test_resumed_log_keeps_rows_up_to_the_checkpoint(tmp_path, caplog):
    run_log = RunLogger(tmp_path, tensorboard=False)
    for iteration in (1, 2, 3):
        run_log.log(_result(iteration, note="form\x0cfeed and, comma"))
    run_log.close()
    with (tmp_path / "progress.csv").open("a") as handle:
        handle.write("4,40")  # a crash while writing row 4
    resumed = RunLogger(tmp_path, tensorboard=False, resume_at=2)  # restored at iteration 2
    assert "cut short" in caplog.text and "dropped 1 entries after iteration 2" in caplog.text
    assert [row["training_iteration"] for row in resumed.rows] == [1, 2]
    assert resumed.rows[1]["note"] == "form\x0cfeed and, comma"  # read back whole, not split at \x0c
    assert resumed.rows[1]["policies/main/episode_return_mean"] == 0.2
    resumed.log(_result(3))
    with (tmp_path / "progress.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["training_iteration"] for row in rows] == ["1", "2", "3"]
    assert [row["note"] for row in rows] == ["form\x0cfeed and, comma"] * 2 + [""]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.csv"]  # no temporary file left


def test_resumed_log_that_cannot_be_read_is_an_error_and_stays(tmp_path):
    (tmp_path / "progress.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(RunLogError, match=r"progress\.csv cannot be read back"):
        RunLogger(tmp_path, tensorboard=False, resume_at=3)
    assert (tmp_path / "progress.csv").read_bytes() == b"\xff\xfe\x00"


def test_the_learning_curve_of_a_league_with_dozens_of_policies_fits_its_legend(tmp_path):
    # Snapshots come and go: 40 policies made matplotlib give up on the layout (a UserWarning
    # and a legend over the curves).
    import warnings

    run_log = RunLogger(tmp_path)
    for iteration in range(1, 41):
        policies = {f"main_v{i}": {"episode_return_mean": -0.5, "num_episodes": 3} for i in range(iteration)}
        run_log.log({**_result(iteration), "policies": {**_result(iteration)["policies"], **policies}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = run_log.plot()
    assert png.stat().st_size > 0


def test_the_learning_curve_draws_each_policys_evaluation_once(tmp_path, monkeypatch):
    # evaluate()'s whole-episode, per-agent, min/max and RLlib-named figures were each a line too.
    from matplotlib.axes import Axes

    labels = []
    plot = Axes.plot
    monkeypatch.setattr(Axes, "plot", lambda self, *args, **kwargs: (labels.append(kwargs.get("label")),
                                                                      plot(self, *args, **kwargs))[1])
    stats = {"episode_return_mean": 1.0, "episode_return_min": 0.0, "episode_return_max": 2.0}
    evaluation = {**stats, "agent_episode_returns_mean": {"player1": 1.0},
                  "policies": {"main": {**stats, "num_episodes": 2}},
                  "env_runners": {**stats, "module_episode_returns_mean": {"main": 1.0}}}
    run_log = RunLogger(tmp_path, tensorboard=False)
    for iteration in (1, 2):
        run_log.log(_result(iteration, evaluation=evaluation))
    run_log.plot()
    assert labels == ["main", "evaluation/policies/main/episode_return_mean"]
    # A policy id holding "/" is named whole (its first part only, before).
    labels.clear()
    run_log = RunLogger(tmp_path / "slash", tensorboard=False)
    run_log.log({"training_iteration": 1, "policies": {"team/red": {"episode_return_mean": 1.0}}})
    run_log.plot()
    assert labels == ["team/red"]


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path):
    # The charts were written in place by savefig: Ctrl-C during the final evaluation, which
    # rewrites win_rate.png after every match, could leave half a PNG.
    path = tmp_path / "win_rate.png"
    path.write_bytes(b"old chart")

    def interrupted(tmp):
        tmp.write_bytes(b"half a ch")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, interrupted)
    assert path.read_bytes() == b"old chart" and [p.name for p in tmp_path.iterdir()] == ["win_rate.png"]
    seen = []
    write_atomic(path, lambda tmp: (seen.append(tmp.suffix), tmp.write_bytes(b"new chart")))
    assert path.read_bytes() == b"new chart" and seen == [".png"]  # matplotlib reads the format from it
