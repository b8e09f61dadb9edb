"""What the checker hands back: frozen :class:`Finding` records inside a :class:`ConformanceReport`.

Example:
    >>> from marl_core.conformance import ConformanceReport, Finding
    >>> finding = Finding("rewards.numeric", "error", "reward of agent 'a' is nan", "a", 3, "Return floats.")
    >>> report = ConformanceReport(target="MyEnv", findings=(finding,))
    >>> report.ok
    False
    >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
    marl-check MyEnv: FAILED, 1 error, 0 warnings (seed 0, 0 episodes, 0 steps)
    <BLANKLINE>
    error rewards.numeric (agent 'a', step 3)
        reward of agent 'a' is nan
        fix: Return floats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from marl_core.conformance.rules import Severity
from marl_core.errors import ConformanceError


@dataclass(frozen=True)
class Finding:
    """One violation of one rule.

    Attributes:
        rule: the rule id (see :data:`marl_core.conformance.rules.RULES`).
        severity: ``"error"`` or ``"warning"``.
        message: what was expected and what arrived, with the episode and seed.
        agent: the agent concerned, or None when the finding is about the whole env.
        step: the step within the episode (0 is ``reset()``), or None when not tied to a step.
        hint: how to fix it.
        traceback: the formatted traceback when the finding is an exception in the env's code.
    """

    rule: str
    severity: Severity
    message: str
    agent: Any = None
    step: int | None = None
    hint: str = ""
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict of the fields (non-JSON agent ids as their ``repr``)."""
        agent = self.agent if self.agent is None or isinstance(self.agent, (str, int)) else repr(self.agent)
        return {
            "rule": self.rule,
            "severity": self.severity,
            "message": self.message,
            "agent": agent,
            "step": self.step,
            "hint": self.hint,
            "traceback": self.traceback,
        }

    def __str__(self) -> str:
        where = []
        if self.agent is not None:
            where.append(f"agent {self.agent!r}")
        if self.step is not None:
            where.append(f"step {self.step}")
        head = f"{self.severity} {self.rule}" + (f" ({', '.join(where)})" if where else "")
        lines = [head, *("    " + line for line in self.message.splitlines())]
        if self.hint:
            lines.append(f"    fix: {self.hint}")
        if self.traceback:
            lines.append("    traceback:")
            lines += ["        " + line for line in self.traceback.splitlines()]
        return "\n".join(lines)


@dataclass(frozen=True)
class ConformanceReport:
    """The outcome of :func:`~marl_core.conformance.check_env`.

    Attributes:
        target: what was checked, e.g. ``"examples.tic_tac_toe.TicTacToe"``.
        findings: every finding, errors first, in the order they were found.
        seed: the first seed (episode ``i`` uses ``seed + i``).
        episodes: how many episodes were explored.
        max_steps: the step budget per episode.
        steps: how many ``step()`` calls the checker made in all.
        seconds: how long the check took.
        skipped: the rule ids that were not checked.
        skipped_exceptions: findings of skipped rules that cut an episode short: exceptions of
            the env's code (``api.reset``, ``api.step``; ``spaces.defined`` for an action space
            whose sampling raised), or results play could not go on from (a malformed reset or
            step, an acting agent without an action space or a legal action, nobody to act):
            less was checked than it seems.
        stopped: why the check stopped before its end, and where (a partial report: Ctrl-C, or
            ``marl-check --timeout``); empty when it finished.
        via: how ``bridges.wrap`` made the target a multi-agent env, and why (e.g. a
            ``gymnasium.Env`` without ``observation_spaces`` is checked as a one-agent
            ``GymnasiumEnv``); empty when the target is one.
    """

    target: str
    findings: tuple[Finding, ...] = ()
    seed: int = 0
    episodes: int = 0
    max_steps: int = 0
    steps: int = 0
    seconds: float = 0.0
    skipped: tuple[str, ...] = field(default_factory=tuple)
    via: str = ""
    skipped_exceptions: int = 0
    stopped: str = ""

    @property
    def ok(self) -> bool:
        """True when the check finished and no finding has severity ``"error"`` (warnings allowed)."""
        return not self.errors and not self.stopped

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings of severity ``"error"``."""
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """The findings of severity ``"warning"``."""
        return tuple(f for f in self.findings if f.severity == "warning")

    @property
    def rules(self) -> set[str]:
        """The ids of the rules with at least one finding."""
        return {f.rule for f in self.findings}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable summary (``json.dumps(report.to_dict())`` works)."""
        return {
            "target": self.target,
            "ok": self.ok,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "seed": self.seed,
            "episodes": self.episodes,
            "max_steps": self.max_steps,
            "steps": self.steps,
            "seconds": round(self.seconds, 4),
            "skipped": list(self.skipped),
            "skipped_exceptions": self.skipped_exceptions,
            "stopped": self.stopped,
            "via": self.via,
            "findings": [f.to_dict() for f in self.findings],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)

    def raise_if_errors(self) -> None:
        """Raise :class:`~marl_core.errors.ConformanceError` listing the errors, if any.

        Raises:
            ConformanceError: at least one finding has severity ``"error"``.
        """
        if self.errors:
            lines = [f"{self.target} breaks {len(self.errors)} conformance rule(s):"]
            lines += [f"- {f.rule}: {f.message.splitlines()[0]}" for f in self.errors]
            raise ConformanceError("\n".join(lines), self.errors)

    def __str__(self) -> str:
        verdict = "FAILED" if self.errors else "INCOMPLETE" if self.stopped else "OK"
        errors, warnings = len(self.errors), len(self.warnings)
        head = (
            f"marl-check {self.target}: {verdict}, {errors} error{'s' * (errors != 1)}, "
            f"{warnings} warning{'s' * (warnings != 1)} (seed {self.seed}, {self.episodes} "
            f"episodes, {self.steps} steps"
        )
        head += f", {self.seconds:.2f} s)" if self.seconds else ")"
        parts = [head + (f"\n{self.via}" if self.via else "") + (f"\nthe check {self.stopped}: the findings until then"
                                                                 if self.stopped else "")]
        if self.skipped:
            hid = self.skipped_exceptions
            parts.append(f"skipped rules: {', '.join(self.skipped)}" + (
                f" (they hid {hid} finding{'s' * (hid != 1)} that cut an episode short, an exception raised by the "
                "env's code or results play could not go on from: less was checked than the counts say)" if hid else ""))
        parts += [str(f) for f in self.findings]
        return "\n\n".join(parts)
