"""The rule catalog: stable public ids, complete entries, and docs/rules.md generated from it."""

from __future__ import annotations

from pathlib import Path

from marl_core.conformance import RULES
from marl_core.conformance.rules import catalog_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"

PUBLIC = {
    "api.reset": "error",
    "api.step": "error",
    "api.all-key": "error",
    "ids.known": "error",
    "ids.agents-attr": "error",
    "spaces.defined": "error",
    "spaces.obs-contains": "error",
    "rewards.numeric": "error",
    "infos.keys": "error",
    "lifecycle.dead-agent": "error",
    "determinism.seed": "error",
    "pickle": "error",
    "masks.valid": "error",
    "actions.unchanged": "warning",
    "obs.aliasing": "warning",
    "termination.bounded": "warning",
    "close.idempotent": "warning",
}


def test_the_published_ids_keep_their_severity() -> None:
    for rule_id, severity in PUBLIC.items():
        assert RULES[rule_id].severity == severity


def test_every_rule_is_complete() -> None:
    for rule_id, rule in RULES.items():
        assert rule.id == rule_id
        assert rule.severity in ("error", "warning")
        assert rule.summary and rule.example and rule.fix


def test_docs_page_is_the_generated_catalog() -> None:
    assert DOCS.read_text() == catalog_markdown(), "regenerate docs/rules.md with marl-check --list-rules > docs/rules.md"
    for rule_id in RULES:
        assert f"## `{rule_id}`" in DOCS.read_text()
