"""Findings are frozen; reports read well as text, serialize to JSON and raise on request."""

from __future__ import annotations

import dataclasses
import json

import pytest

from marl_core.conformance import ConformanceReport, Finding, check_env
from marl_core.errors import ConformanceError
from tests.fixtures import broken_envs


def test_finding_is_frozen() -> None:
    finding = Finding("pickle", "error", "does not pickle")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.rule = "api.step"  # type: ignore[misc]


def test_text_report_is_plain_and_complete() -> None:
    report = check_env(broken_envs.StepRaises)
    text = str(report)
    assert "\x1b" not in text
    assert text.startswith("marl-check tests.fixtures.broken_envs.StepRaises: FAILED, 1 error, 0 warnings")
    assert "error api.step (step 3)" in text
    assert "fix: " in text and "traceback:" in text


def test_ok_report_text() -> None:
    text = str(check_env(broken_envs.Duel))
    assert ": OK, 0 errors, 0 warnings" in text


def test_to_dict_round_trips_through_json() -> None:
    report = check_env(broken_envs.IntIds)
    data = json.loads(report.to_json())
    assert data["ok"] is True and data["warnings"] == 1
    (finding,) = data["findings"]
    assert finding["rule"] == "ids.strings"
    assert data["target"] == "tests.fixtures.broken_envs.IntIds"


def test_agents_that_are_not_json_become_their_repr() -> None:
    finding = Finding("ids.known", "error", "odd id", agent=("team", 1), step=2)
    assert finding.to_dict()["agent"] == "('team', 1)"
    json.dumps(finding.to_dict())


def test_errors_come_before_warnings_and_only_errors_make_it_fail() -> None:
    warning = Finding("close.idempotent", "warning", "close() raised")
    error = Finding("pickle", "error", "does not pickle")
    report = ConformanceReport("X", (error, warning))
    assert report.errors == (error,) and report.warnings == (warning,)
    assert not report.ok
    with pytest.raises(ConformanceError, match="pickle"):
        report.raise_if_errors()
    ConformanceReport("X", (warning,)).raise_if_errors()


def test_collector_merges_repeats_and_caps_each_rule() -> None:
    from marl_core.conformance.collect import MAX_PER_RULE, Collector

    collector = Collector(skip=frozenset({"pickle"}))
    for step in range(1, 4):
        collector.add("rewards.numeric", f"reward of 'a' at step {step} is nan", agent="a", step=step, key="nan")
    for index in range(MAX_PER_RULE + 5):
        collector.add("ids.known", f"unknown key 'x{index}'", agent=f"x{index}")
        collector.add("ids.known", f"unknown key 'x{index}'", agent=f"x{index}")
    collector.add("pickle", "does not pickle")
    findings = collector.findings()
    nan = [f for f in findings if f.rule == "rewards.numeric"]
    assert len(nan) == 1 and nan[0].step == 1 and "seen 3 times" in nan[0].message
    known = [f for f in findings if f.rule == "ids.known"]
    assert len(known) == MAX_PER_RULE + 1
    assert known[-1].message.startswith("5 more distinct violations of ids.known")
    assert "seen 10 times" in known[-1].message
    assert not any(f.rule == "pickle" for f in findings)
