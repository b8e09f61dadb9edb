"""marl-matrix: case selection, row isolation (crash, timeout) and the committed compat_matrix.md."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from bridges.compat import Case
from bridges.matrix import (
    HEADER,
    Row,
    fast_subset,
    load_cases,
    main,
    read_rows,
    render,
    run_all,
    versions,
)

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "compat_matrix.md"


def crashing_env(**kwargs: object) -> None:
    """A factory that kills its process, as a segfault in a foreign library would."""
    os._exit(3)


def hanging_env(**kwargs: object) -> None:
    """A factory that never returns in time."""
    time.sleep(120)


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
        Case("test/hang", "marl_core", "tests.bridges.test_matrix:hanging_env"),
        Case("test/left", "marl_core", "nowhere:nothing", left_out="kept out on purpose"),
    ]
    started = time.monotonic()
    crash, good, hang, left = run_all(cases, jobs=2, timeout=5.0)
    assert time.monotonic() - started < 60
    assert crash.gap == "crashed: the row's process exited with code 3"
    assert hang.gap == "timeout: no result within 5 s"
    assert (good.bridge, good.errors, good.warnings, good.round_trip, good.raw_us) == (
        "RockPaperScissors", "0", "0", "-", "-")
    assert float(good.bridged_us) > 0
    assert left.gap == "left out: kept out on purpose"


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
