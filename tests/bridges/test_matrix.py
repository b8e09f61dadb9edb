"""marl-matrix: case selection, row isolation (crash, timeout) and the committed compat_matrix.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyspiel
import pytest

from bridges.compat import Case
from bridges.matrix import (
    HEADER,
    Row,
    build,
    fast_subset,
    load_cases,
    main,
    read_rows,
    render,
    run_all,
    versions,
)
from bridges.matrix_probes import overhead, raw_observation, round_trip
from bridges.openspiel import OpenSpielEnv
from bridges.pettingzoo import ParallelPettingZooEnv, PettingZooEnv
from bridges.pettingzoo_export import MultiAgentAECEnv, MultiAgentParallelEnv
from tests.core.test_vector import wait_gone

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "compat_matrix.md"


def crashing_env(**kwargs: object) -> None:
    """A factory that kills its process, as a segfault in a foreign library would."""
    os._exit(3)


def hanging_env(**kwargs: object) -> None:
    """A factory that never returns in time."""
    time.sleep(120)


def _case(case_id: str) -> Case:
    """The row ``case_id`` of the real case tables."""
    return next(case for case in load_cases()[0] if case.id == case_id)


def test_every_table_loads_and_ids_are_unique() -> None:
    cases, missing = load_cases()
    assert missing == []
    counts = Counter(case.id for case in cases)
    assert [case_id for case_id, n in counts.items() if n > 1] == []
    assert {case.source for case in cases} == {"pettingzoo-aec", "pettingzoo-parallel", "openspiel", "rllib", "gymnasium"}
    assert all(case.left_out is None or case.left_out.strip() for case in cases)


def test_fast_subset_takes_the_first_runnable_fast_cases_of_each_source() -> None:
    cases = [
        Case("a/slow", "rllib", "m:a", slow=True),
        Case("a/left", "rllib", "m:a", left_out="needs a server"),
        Case("a/1", "rllib", "m:a"),
        Case("b/1", "gymnasium", "m:b"),
        Case("a/2", "rllib", "m:a"),
        Case("a/3", "rllib", "m:a"),
    ]
    assert [case.id for case in fast_subset(cases)] == ["a/1", "b/1", "a/2"]


def test_rows_survive_markdown_including_pipes() -> None:
    row = Row("x/y", "rllib", "RLlibEnv", "1", "0", "a.b", "fail: a | b", "1.0", "2.0", "2.00x", "rule: msg | more")
    assert Row.parse(row.markdown()) == row
    text = render([row], subset="all", missing=[], seconds=1.0)
    assert read_rows(text) == [row]
    assert HEADER in text


def test_header_lists_upstream_versions() -> None:
    names = {name.lower() for name, _ in versions()}
    assert {"python", "gymnasium", "numpy", "pettingzoo", "open-spiel", "ray", "torch", "shimmy", "supersuit"} <= names


def test_a_crash_or_a_hang_fails_only_its_own_row() -> None:
    cases = [
        Case("test/crash", "marl_core", "tests.bridges.test_matrix:crashing_env"),
        Case("test/good", "marl_core", "examples.rock_paper_scissors:RockPaperScissors", max_steps=20),
        Case("test/hang", "marl_core", "tests.bridges.test_matrix:hanging_env", notes="waits forever"),
        Case("test/left", "marl_core", "nowhere:nothing", left_out="kept out on purpose"),
    ]
    started = time.monotonic()
    crash, good, hang, left = run_all(cases, jobs=2, timeout=5.0)
    assert time.monotonic() - started < 60
    assert crash.gap == "crashed: the row's process exited with code 3"
    assert hang.gap == "timeout: no result within 5 s (note: waits forever)"  # the notes were dropped
    assert (good.bridge, good.errors, good.warnings, good.round_trip, good.raw_us) == (
        "RockPaperScissors", "0", "0", "-", "-")
    assert float(good.bridged_us) > 0
    assert left.gap == "left out: kept out on purpose"


def test_a_module_an_extra_installs_leaves_its_row_out_saying_which_extra() -> None:
    # Without the envs extra, every butterfly row "crashed: ModuleNotFoundError: No module named 'pygame'".
    (row,) = run_all([Case("test/extra", "marl_core", "tests.fixtures.matrix_envs:env_of_a_missing_extra")],
                     jobs=1, timeout=60.0)
    assert row.gap.startswith('left out: this install lacks a module (`pip install "marl-bridges[envs]"` installs '
                              "it): ModuleNotFoundError: import of pygame halted; None in sys.modules")
    assert "Summary: 0 clean, 0 with gaps, 1 left out." in render([row], subset="all", missing=[], seconds=1.0)


def test_rows_may_start_processes_and_none_outlives_its_row(tmp_path: Path, capfd) -> None:
    # An env's multiprocessing worker crashed its row ("daemonic processes are not allowed to have
    # children"); an env's subprocess outlived the run; what an env printed to fd 1 reached the output.
    pids = tmp_path / "pids"
    cases = [
        Case("test/leaves", "marl_core", "tests.fixtures.matrix_envs:process_leaving_env", max_steps=10,
             kwargs={"pids": str(pids)}),
        Case("test/multiprocessing", "marl_core", "tests.fixtures.matrix_envs:multiprocessing_env", max_steps=10),
    ]
    leaves, workers = run_all(cases, jobs=2, timeout=120.0)
    assert (leaves.errors, leaves.gap) == ("0", "-") and (workers.errors, workers.gap) == ("0", "-")
    started = [int(pid) for pid in pids.read_text().split()]
    assert started and wait_gone(started, timeout=10.0) == []
    assert "printed by the env to fd 1" not in capfd.readouterr().out


def test_a_terminated_run_takes_its_rows_with_it() -> None:
    # Rows run in their own process groups: a SIGTERM to the run's group (timeout, a CI cancel)
    # no longer reached them, and a hanging row went on as an orphan.
    code = ("from bridges.matrix import Case, run_all\n"
            "run_all([Case('test/hang', 'marl_core', 'tests.bridges.test_matrix:hanging_env')], jobs=1, timeout=600)")
    run = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        rows: list[int] = []
        while not rows and time.monotonic() < deadline:
            time.sleep(0.2)
            rows = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(run.pid)], capture_output=True,
                                                       text=True, check=False).stdout.split()]
        assert rows, "the row's process did not start"
        time.sleep(1.0)  # into the row's env factory
        os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert wait_gone(rows, timeout=10.0) == []


@pytest.mark.slow
def test_fast_subset_regenerates_the_committed_rows(tmp_path: Path) -> None:
    output = tmp_path / "fast.md"
    assert main(["--subset", "fast", "--jobs", "2", "--output", str(output)]) == 0
    fresh = read_rows(output.read_text(encoding="utf-8"))
    committed = {row.case: row for row in read_rows(COMMITTED.read_text(encoding="utf-8"))}
    cases, _ = load_cases()
    assert [row.case for row in fresh] == [case.id for case in fast_subset(cases)]
    for row in fresh:
        assert row.case in committed, f"{row.case} is missing from compat_matrix.md: regenerate it with marl-matrix"
        assert row.deterministic() == committed[row.case].deterministic()


def test_a_partial_run_replaces_its_rows_and_keeps_the_others(tmp_path: Path, monkeypatch, capsys) -> None:
    import bridges.matrix as matrix

    cases = [
        Case("test/first", "marl_core", "examples.rock_paper_scissors:RockPaperScissors", max_steps=20),
        Case("test/second", "marl_core", "examples.rock_paper_scissors:RockPaperScissors", max_steps=20),
    ]
    monkeypatch.setattr(matrix, "load_cases", lambda: (cases, []))
    output = tmp_path / "matrix.md"
    assert main(["--jobs", "1", "--output", str(output)]) == 0
    assert "Subset: `all`; 2 rows run in " in output.read_text(encoding="utf-8")
    first, _ = read_rows(output.read_text(encoding="utf-8"))
    marked = Row(**{**first.__dict__, "bridged_us": "12345.0"})  # tells the kept row from a rerun one
    output.write_text(output.read_text(encoding="utf-8").replace(first.markdown(), marked.markdown()), encoding="utf-8")
    assert main(["--jobs", "1", "--only", "second", "--output", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    rows = read_rows(text)
    assert [row.case for row in rows] == ["test/first", "test/second"] and rows[0] == marked
    assert "Subset: `1 rows rerun (all, --only second), the other 1 kept from the last run`; 1 rows run in " in text
    before = output.read_text(encoding="utf-8")
    assert main(["--only", "no_such_case", "--output", str(output)]) == 2
    assert "no case id contains 'no_such_case'" in capsys.readouterr().err
    monkeypatch.setattr(matrix, "fast_subset", lambda cases: cases[:1])  # it said no case id contains 'second'
    assert main(["--subset", "fast", "--only", "second", "--output", str(output)]) == 2
    assert ("no case id in the fast subset (drop --subset fast to run it) contains 'second'"
            in capsys.readouterr().err)
    assert output.read_text(encoding="utf-8") == before
    # An output that cannot be written is refused before any row runs (it failed after all of them).
    for unwritable, why in ((output.parent / "missing" / "m.md", "there is no folder"),
                            (output.parent, "it is a directory")):
        assert main(["--jobs", "1", "--only", "second", "--output", str(unwritable)]) == 2
        assert f"cannot write {unwritable}: {why}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [("--timeout", "-1", "a number above 0"), ("--timeout", "nan", "a number above 0"),
     ("--jobs", "0", "an integer above 0"), ("--jobs", "two", "an integer,"), ("--jobs", "1.5", "an integer,")],
)
def test_a_timeout_or_jobs_that_cannot_work_is_a_usage_error(
    flag: str, value: str, expected: str, tmp_path: Path, capsys
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([flag, value, "--output", str(tmp_path / "m.md")])
    assert caught.value.code == 2 and f"argument {flag}: expected {expected}" in capsys.readouterr().err
    assert not (tmp_path / "m.md").exists()


def test_a_row_whose_process_cannot_exit_is_killed_and_keeps_its_row(monkeypatch) -> None:
    import bridges.matrix as matrix
    from tests.fixtures.matrix_envs import LINGER_SECONDS

    monkeypatch.setattr(matrix, "EXIT_SECONDS", 1.0)
    case = Case("test/leaves_thread", "marl_core", "tests.fixtures.matrix_envs:thread_leaving_env", max_steps=20)
    started = time.monotonic()
    (row,) = run_all([case], jobs=1, timeout=60.0)
    # Without a limit on the wait for the process to exit, run_all returns only when the thread ends.
    assert time.monotonic() - started < LINGER_SECONDS / 2
    assert (row.bridge, row.errors, row.warnings) == ("ThreadLeavingRockPaperScissors", "0", "0")
    assert float(row.bridged_us) > 0
    assert row.gap == "- (process killed: still running 1 s after sending its row)"


def test_a_timeout_under_a_second_is_written_as_it_was_given() -> None:
    (hang,) = run_all([Case("test/hang", "marl_core", "tests.bridges.test_matrix:hanging_env")], jobs=1, timeout=0.5)
    assert hang.gap == "timeout: no result within 0.5 s"


def test_a_partial_run_drops_rows_whose_case_is_gone(tmp_path: Path, monkeypatch) -> None:
    import bridges.matrix as matrix

    cases = [
        Case("test/first", "marl_core", "examples.rock_paper_scissors:RockPaperScissors", max_steps=20),
        Case("test/second", "marl_core", "examples.rock_paper_scissors:RockPaperScissors", max_steps=20),
    ]
    monkeypatch.setattr(matrix, "load_cases", lambda: (cases, []))
    old = [
        Row("test/first", "marl_core", errors="0", gap="-"),
        Row("test/gone", "marl_core", errors="0", gap="-"),  # its case was removed from the tables
        Row("test/second", "marl_core", errors="0", gap="-"),
        Row("rllib/unloaded", "rllib", errors="0", gap="-"),  # no rllib case loaded: nothing says it is gone
    ]
    output = tmp_path / "matrix.md"
    output.write_text(render(old, subset="all", missing=[], seconds=1.0), encoding="utf-8")
    assert main(["--jobs", "1", "--only", "second", "--output", str(output)]) == 0
    text = output.read_text(encoding="utf-8")
    assert [row.case for row in read_rows(text)] == ["test/first", "test/second", "rllib/unloaded"]
    assert ("Subset: `1 rows rerun (all, --only second), the other 2 kept from the last run; 1 rows of cases no "
            "longer in the case tables dropped`") in text
    assert "Summary: 3 clean, 0 with gaps, 0 left out." in text


def _raise(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("bridge broken on purpose")


@pytest.mark.parametrize(
    ("case_id", "broken", "passed"),
    [
        ("pettingzoo/classic/tictactoe_v3/aec", PettingZooEnv, "api_test on MultiAgentAECEnv(PettingZooEnv(env))"),
        ("pettingzoo/classic/tictactoe_v3/aec", MultiAgentAECEnv, "api_test on MultiAgentAECEnv(PettingZooEnv(env))"),
        ("pettingzoo/classic/rps_v2/parallel", ParallelPettingZooEnv,
         "parallel_api_test on MultiAgentParallelEnv(ParallelPettingZooEnv(env))"),
        ("pettingzoo/classic/rps_v2/parallel", MultiAgentParallelEnv,
         "parallel_api_test on MultiAgentParallelEnv(ParallelPettingZooEnv(env))"),
    ],
)
def test_the_pettingzoo_round_trip_runs_both_directions_of_our_bridge(
    case_id: str, broken: type, passed: str, monkeypatch
) -> None:
    case = _case(case_id)
    assert round_trip(case, build) == f"pass: {passed}"
    monkeypatch.setattr(broken, "step", _raise)  # either direction broken: PettingZoo's test must see it
    assert round_trip(case, build) == "fail: RuntimeError: bridge broken on purpose"


@pytest.mark.parametrize("case_id", ["openspiel/tic_tac_toe", "openspiel/kuhn_poker", "openspiel/goofspiel"])
def test_the_openspiel_round_trip_sees_a_bridge_that_applies_another_action(case_id: str, monkeypatch) -> None:
    case = _case(case_id)
    assert round_trip(case, build).startswith("pass: ")
    real_step = OpenSpielEnv.step

    def next_legal_step(self: OpenSpielEnv, action_dict: dict) -> Any:
        """The step of a bridge that applies the next legal action, not the one it is sent."""
        moved = {}
        for agent, action in action_dict.items():
            legal = self.state.legal_actions(int(agent.rsplit("_", 1)[1]))
            moved[agent] = legal[(legal.index(action) + 1) % len(legal)]
        return real_step(self, moved)

    monkeypatch.setattr(OpenSpielEnv, "step", next_legal_step)
    assert round_trip(case, build).startswith("fail: step 0: the probe sent [")


def test_the_openspiel_round_trip_sees_an_episode_ended_early(monkeypatch) -> None:
    real_step = OpenSpielEnv.step

    def ending_step(self: OpenSpielEnv, action_dict: dict) -> Any:
        obs, rewards, terminateds, truncateds, infos = real_step(self, action_dict)
        return obs, rewards, dict.fromkeys(terminateds, True), truncateds, infos

    monkeypatch.setattr(OpenSpielEnv, "step", ending_step)
    assert round_trip(_case("openspiel/tic_tac_toe"), build) == (
        "fail: step 0: the bridge ended the episode, pyspiel's game is not over")


def test_both_openspiel_overhead_arms_send_python_ints_and_read_observers(monkeypatch) -> None:
    sent: list[Any] = []
    real_step, real_apply, real_apply_joint = OpenSpielEnv.step, pyspiel.State.apply_action, pyspiel.State.apply_actions
    from_state: list[str] = []

    def bridged_step(self: OpenSpielEnv, action_dict: dict) -> Any:
        sent.extend(action_dict.values())
        return real_step(self, action_dict)

    def apply_action(self: Any, action: Any) -> None:
        sent.append(action)
        real_apply(self, action)

    def apply_actions(self: Any, actions: list) -> None:
        sent.extend(actions)
        real_apply_joint(self, actions)

    monkeypatch.setattr(OpenSpielEnv, "step", bridged_step)
    monkeypatch.setattr(pyspiel.State, "apply_action", apply_action)
    monkeypatch.setattr(pyspiel.State, "apply_actions", apply_actions)
    for name in ("observation_tensor", "information_state_tensor"):  # what the raw arm read before
        monkeypatch.setattr(pyspiel.State, name, lambda self, player, name=name: from_state.append(name))
    for case_id in ("openspiel/tic_tac_toe", "openspiel/goofspiel", "openspiel/leduc_poker"):
        overhead(_case(case_id), build)
    assert sent and {type(action) for action in sent} == {int}
    assert from_state == []  # both arms read observations through the observer's set_from


def test_both_openspiel_overhead_arms_draw_the_same_actions(monkeypatch) -> None:
    from bridges import matrix_probes

    case = _case("openspiel/tic_tac_toe")  # no chance: the same draws give the same games
    sent: list[int] = []
    real_step, real_apply = OpenSpielEnv.step, pyspiel.State.apply_action
    monkeypatch.setattr(OpenSpielEnv, "step", lambda self, actions: (sent.extend(actions.values()),
                                                                      real_step(self, actions))[1])
    bridged = matrix_probes._openspiel_ours(build(case))
    while len(sent) < 40:
        next(bridged)
    bridged_actions, sent[:] = sent[:40], []
    monkeypatch.setattr(OpenSpielEnv, "step", real_step)
    monkeypatch.setattr(pyspiel.State, "apply_action", lambda self, action: (sent.append(action),
                                                                             real_apply(self, action))[1])
    raw = matrix_probes._openspiel_raw(case)
    while len(sent) < 40:
        next(raw)
    assert sent[:40] == bridged_actions


@pytest.mark.parametrize("game", ["tic_tac_toe", "battleship", "python_kuhn_poker"])
def test_the_raw_arm_reads_the_observation_the_bridge_hands_out(game: str) -> None:
    env = OpenSpielEnv(game)
    obs, _ = env.reset(seed=0)
    observe, view = raw_observation(env.game, env.observation_type)
    assert view is not None  # these games have an observer: no copy through a Python list
    for agent, observation in obs.items():
        assert observe(env.state, int(agent.rsplit("_", 1)[1])) is None  # set_from fills the view in place
        assert np.array_equal(view.reshape(observation["observation"].shape), observation["observation"])
