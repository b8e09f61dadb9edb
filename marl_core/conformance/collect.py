"""Collecting findings: one per distinct violation, repeats counted, exceptions with tracebacks."""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any

from marl_core.conformance.report import Finding
from marl_core.conformance.rules import RULES

ENV_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit)
"""What a call into the env's code may raise and the checker turns into a finding: any exception,
and ``sys.exit()``, which would otherwise end the check as if it had passed."""



class CheckInterrupted(BaseException):
    """Stops a check from outside (``marl-check --timeout``); like KeyboardInterrupt, never
    taken for something the env raised."""


MAX_PER_RULE = 10
"""Distinct findings kept per rule; further ones are summed up in one closing finding."""

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def _not_the_envs() -> tuple[str, ...]:
    """Paths of the code outside the checker that it calls on the env's values: marl_core's space
    and error helpers, numpy, and gymnasium's spaces."""
    import gymnasium.spaces
    import numpy

    core = os.path.dirname(_OWN_DIR)
    return (os.path.join(core, "spaces.py"), os.path.join(core, "errors.py"),
            os.path.dirname(os.path.abspath(numpy.__file__)) + os.sep,
            os.path.dirname(os.path.abspath(gymnasium.spaces.__file__)) + os.sep)


def env_method_of(error: BaseException, past_helpers: bool = False) -> str | None:
    """The name of the first function outside the checker in ``error``'s traceback: the env's
    method that the checker called (``reset``, ``step``, ...). With ``past_helpers``, also outside
    the helpers the checker calls on the env's values, so that None means the error is the
    checker's own."""
    skipped = (_OWN_DIR, *_not_the_envs()) if past_helpers else (_OWN_DIR,)
    for frame in traceback.extract_tb(error.__traceback__):
        if not os.path.abspath(frame.filename).startswith(skipped):
            return frame.name
    return None


def format_exception(error: BaseException) -> str:
    """The traceback of ``error`` without the checker's own frames."""
    summary = traceback.TracebackException.from_exception(error)
    kept = [frame for frame in summary.stack if not os.path.abspath(frame.filename).startswith(_OWN_DIR)]
    summary.stack = traceback.StackSummary.from_list(kept)
    return "".join(summary.format()).rstrip()


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters on one line; a repr that raises does not stop
    the check (the env's objects are anything)."""
    try:
        text = repr(value)
    except ENV_ERRORS as error:
        text = f"<{type(value).__name__} whose repr() raised {type(error).__name__}>"
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(error: BaseException) -> str:
    """``"TypeError: message"`` for ``error`` (its message as Python shows one whose str() raises)."""
    try:
        message = str(error)
    except ENV_ERRORS:
        message = "<exception str() failed>"
    return f"{type(error).__name__}: {message}"


@dataclass
class _Entry:
    rule: str
    message: str
    agent: Any
    step: int | None
    hint: str
    traceback: str | None
    count: int = 1


# Rules whose findings report an exception of the env that ended an episode there.
_CUT_SHORT_BY_EXCEPTIONS = frozenset({"api.reset", "api.step"})


class Collector:
    """Gathers findings, merging repeats of the same violation.

    A violation is identified by its rule, agent and ``key`` (by default the message); repeats only
    raise its count, so a bug that fires on every step gives one finding saying how often it fired.

    Args:
        skip: rule ids whose findings are dropped (the caller asked not to check them).

    Attributes:
        skipped_exceptions: how many dropped findings cut an episode short: an exception raised
            by env code (``api.reset``, ``api.step``, an action space whose sampling raised), or
            results play cannot go on from (added with ``cut_short``): the report says so.
    """

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.skip = skip
        self.skipped_exceptions = 0
        self._entries: dict[tuple[str, Any, str], _Entry] = {}
        self._per_rule: dict[str, int] = {}
        self._overflow: dict[str, dict[tuple[str, Any, str], int]] = {}

    def cut_short(self, rule: str) -> None:
        """Count an episode that a finding of ``rule`` stopped, when ``rule`` is skipped (its
        findings, added without ``cut_short``, are dropped)."""
        self.skipped_exceptions += rule in self.skip

    def wants(self, rule: str) -> bool:
        """Whether ``rule`` is being checked."""
        return rule not in self.skip

    def has(self, rule: str) -> bool:
        """Whether ``rule`` has a finding already."""
        return self._per_rule.get(rule, 0) > 0 or rule in self._overflow

    def add(
        self,
        rule: str,
        message: str,
        *,
        agent: Any = None,
        step: int | None = None,
        hint: str | None = None,
        error: BaseException | None = None,
        key: str | None = None,
        cut_short: bool = False,
    ) -> None:
        """Record one violation of ``rule`` (ignored when the rule is skipped, but counted when
        it ended the episode: ``api.reset`` and ``api.step`` findings that carry an exception,
        and those added with ``cut_short``)."""
        if rule in self.skip:
            self.skipped_exceptions += cut_short or (error is not None and rule in _CUT_SHORT_BY_EXCEPTIONS)
            return
        if rule not in RULES:  # a checker bug, not the user's: never hide it behind a finding
            raise KeyError(f"unknown rule id {rule!r}")
        identity = (rule, _hashable(agent), message if key is None else key)
        entry = self._entries.get(identity)
        if entry is not None:
            entry.count += 1
            return
        if self._per_rule.get(rule, 0) >= MAX_PER_RULE:
            extra = self._overflow.setdefault(rule, {})
            extra[identity] = extra.get(identity, 0) + 1
            return
        self._per_rule[rule] = self._per_rule.get(rule, 0) + 1
        if error is not None and describe(error) not in message:
            message = f"{message}: {describe(error)}"
        self._entries[identity] = _Entry(
            rule,
            message,
            agent,
            step,
            RULES[rule].fix if hint is None else hint,
            None if error is None else format_exception(error),
        )

    def findings(self) -> tuple[Finding, ...]:
        """Every finding, errors first, then in the order found."""
        found = []
        for entry in self._entries.values():
            message = entry.message
            if entry.count > 1:
                message += f" (seen {entry.count} times; the first is reported)"
            found.append(
                Finding(entry.rule, RULES[entry.rule].severity, message, entry.agent, entry.step, entry.hint, entry.traceback)
            )
        for rule, extra in self._overflow.items():
            named = sorted({repr(agent) for _, agent, _ in extra if agent is not None})
            whom = f" (agents {', '.join(named[:12])}{', ...' if len(named) > 12 else ''})" if named else ""
            found.append(
                Finding(
                    rule,
                    RULES[rule].severity,
                    f"{len(extra)} more distinct violations of {rule}{whom}, seen {sum(extra.values())} times, "
                    f"beyond the first {MAX_PER_RULE} reported",
                    None,
                    None,
                    RULES[rule].fix,
                )
            )
        return tuple(sorted(found, key=lambda f: f.severity != "error"))


def is_hashable(value: Any) -> bool:
    """Whether ``value`` can be a dict key (an agent id must be)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _hashable(value: Any) -> Any:
    return value if is_hashable(value) else repr(value)
