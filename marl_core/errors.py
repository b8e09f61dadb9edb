"""The exception hierarchy of marl-bridges.

Every error caused by bad input is a :class:`MultiAgentEnvError` (a ``ValueError``) whose message
names the agent, what was expected and what arrived, so a user can fix the call without reading
our source. Errors are raised before any state changes, so the env is still usable afterwards.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Iterable
from typing import Any

from gymnasium.error import Error as GymnasiumError


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """An unpickled error: its message arguments and attributes, without calling ``cls.__init__``."""
    error = cls.__new__(cls)
    builtin = next(base for base in cls.__mro__ if base.__module__ == "builtins")
    builtin.__init__(error, *args)  # ImportError's, say, sets its msg
    error.__dict__.update(state)
    return error


class _Picklable:
    """Errors that pickle whatever their ``__init__`` takes.

    Python pickles an exception as ``cls(*self.args)``, which fails for an ``__init__`` that takes
    other arguments than its message. Errors raised in worker processes (a process pool, a Ray
    actor) must cross back intact, so ours rebuild from their message and attributes instead.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(vars(self)))  # type: ignore[attr-defined]


def shape_of(result: Any) -> str:
    """What a call returned, in a few words, for messages: a tuple's or list's length and item
    types (``"a tuple of 4 (dict, dict, dict, dict)"``), else its type (``"an int"``)."""
    if isinstance(result, (tuple, list)):
        return f"a {type(result).__name__} of {len(result)} ({', '.join(type(part).__name__ for part in result)})"
    return a_type(result)


def a_type(value: Any) -> str:
    """The type of ``value`` with its article, for messages: ``"a dict"``, ``"an int"``,
    ``"a uint8"`` (see :func:`with_article`)."""
    return with_article(type(value).__name__)


def type_name(value: Any) -> str:
    """What arrived where an env (or another object) belongs, for messages: the full name of
    ``value``'s type; a class or a function by its own name, said as such (passed where an
    instance belongs, it is the usual mistake)."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__} (not an instance: build the env from it first)"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"the function {value.__module__}.{value.__qualname__} (not an env: call it to build one)"
    return f"{type(value).__module__}.{type(value).__qualname__}"


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a message quotes what arrived, not all of it)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def with_article(noun: str) -> str:
    """``noun`` after "a" or "an", as the noun is said: a, e, i, o and "nd" (en-dee) take "an",
    so "an int", "a uint8", "an ndarray"."""
    return f"{'an' if noun[:1].lower() in 'aeio' or noun[:2].lower() == 'nd' else 'a'} {noun}"


def _names(agent_ids: Iterable[Any]) -> str:
    """Render agent ids as a short, stable list for error messages."""
    ids = list(agent_ids)
    shown = ", ".join(repr(a) for a in ids[:12])
    if len(ids) > 12:
        shown += f", ... ({len(ids)} in all)"
    return f"[{shown}]"


class MultiAgentEnvError(_Picklable, ValueError):
    """Base class: bad input to, or bad output from, a multi-agent env."""


class UnknownAgentError(MultiAgentEnvError, KeyError):
    """An agent id that the env does not know."""

    def __init__(self, agent_id: Any, known: Iterable[Any], what: str = "agent") -> None:
        self.agent_id = agent_id
        super().__init__(f"unknown {what} {agent_id!r}; known: {_names(known)}")

    def __str__(self) -> str:  # KeyError would add quotes around the message
        return str(self.args[0])


class UnexpectedActionError(MultiAgentEnvError):
    """An action for an agent that is not asked to act in this step."""

    def __init__(self, agent_ids: Iterable[Any], acting: Iterable[Any]) -> None:
        ids = list(agent_ids)
        self.agent_ids = ids
        noun = "agent" if len(ids) == 1 else "agents"
        which = repr(ids[0]) if len(ids) == 1 else _names(ids)
        super().__init__(
            f"action for {noun} {which} which is not expected to act (acting now: {_names(acting)})"
        )


class MissingActionError(MultiAgentEnvError):
    """An agent that must act did not receive an action."""

    def __init__(self, agent_ids: Iterable[Any], received: Iterable[Any]) -> None:
        ids = list(agent_ids)
        self.agent_ids = ids
        super().__init__(
            f"no action for {_names(ids)}, which must act in this step (actions received for: "
            f"{_names(received)})"
        )


class ActionDictError(MultiAgentEnvError, TypeError):
    """``step()`` received something other than a dict of actions keyed by agent id (a bare
    action, as a single-agent env takes, or a list)."""

    def __init__(self, received: Any, acting: Iterable[Any]) -> None:
        self.received = received
        shown = repr(received)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        super().__init__(
            f"step() takes a dict of actions keyed by agent id, received {type(received).__name__} "
            f"{shown}; acting now: {_names(acting)}"
        )


def _for_agent(agent_id: Any) -> str:
    """" for agent 'x'", or nothing when the caller named no agent (a space checked on its own)."""
    return "" if agent_id is None else f" for agent {agent_id!r}"


class InvalidActionError(MultiAgentEnvError):
    """An action outside the agent's action space."""

    def __init__(self, agent_id: Any, expected: str, received: Any, reason: str = "") -> None:
        self.agent_id = agent_id
        message = f"invalid action{_for_agent(agent_id)}: expected {expected}, received {received!r}"
        super().__init__(f"{message} ({reason})" if reason else message)


class IllegalActionError(InvalidActionError):
    """An action inside the space but masked out (not legal in this state)."""

    def __init__(self, agent_id: Any, received: Any, legal: Iterable[Any], hint: str = "") -> None:
        self.agent_id = agent_id
        self.legal = list(legal)
        message = (
            f"illegal action{_for_agent(agent_id)}: received {received!r}, legal actions now: "
            f"{self.legal}"
        )
        if hint:
            message += f" ({hint})"
        MultiAgentEnvError.__init__(self, message)


class NoLegalActionError(IllegalActionError):
    """An agent whose action mask allows no action at all: there is no action to draw or send."""

    def __init__(self, agent_id: Any, where: str = "") -> None:
        self.agent_id = agent_id
        self.legal = []
        MultiAgentEnvError.__init__(
            self, f"no legal action{_for_agent(agent_id)}: its action mask allows none{where} (it needs at least one 1)"
        )


class ResetNeededError(MultiAgentEnvError):
    """``step()`` called before ``reset()`` or after the episode ended."""


class SeedError(MultiAgentEnvError, GymnasiumError):
    """A seed that is not a non-negative integer (a Gymnasium error too, as Gymnasium raises one)."""

    def __init__(self, seed: Any) -> None:
        super().__init__(f"reset(seed=...) needs a non-negative integer or None, received {seed!r}")


class SpaceError(MultiAgentEnvError):
    """A space is missing, of the wrong type, or does not match its agents."""


class GroupingError(MultiAgentEnvError):
    """An agent grouping that cannot work (overlapping groups, unknown members, acting apart)."""


class EnvContractError(MultiAgentEnvError):
    """A multi-agent env returned something that breaks the contract (see DESIGN.md).

    Attributes:
        rule: the conformance rule id it breaks, where the code that raised knows it (a bridge
            refusing what the env it wraps returned); ``check_env`` files the finding there.
    """

    rule: str | None = None


class EnvRunnerError(MultiAgentEnvError):
    """An env runner that died, or did not return its samples within ``sample_timeout_s``, more
    times in one iteration than ``max_runner_restarts`` allows (the last cause is chained); or
    ``train()`` after ``stop()``, which closed the runners."""


class CheckpointError(MultiAgentEnvError):
    """A checkpoint that is missing, incomplete or does not match the config."""


class TrainingError(MultiAgentEnvError):
    """A PPO update that cannot go on (advantages too large, a loss or gradient that is not
    finite); every policy's weights and optimizer state are left as they were before the
    iteration's update."""


class RunLogError(MultiAgentEnvError):
    """The logs in a run directory cannot be read back to continue them (``marl-train --resume``)."""


class DependencyNotInstalled(_Picklable, ImportError):
    """An optional dependency needed by the requested feature is missing."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is needed for this feature; install it with "
            f"`pip install \"marl-bridges[{extra}]\"`"
        )


# Modules that only an extra of ours installs, by that extra (``pip install "marl-bridges[EXTRA]"``).
_EXTRA_OF_MODULE = {"pygame": "envs", "pymunk": "envs", "Box2D": "envs", "rlcard": "envs", "chess": "envs",
                    "mpe2": "envs", "tree": "rllib", "ray": "rllib", "shimmy": "test"}


def install_hint(error: BaseException | None) -> str:
    """``' (`pip install "marl-bridges[EXTRA]"` installs it)'`` when ``error``, or an error that
    caused it, is a missing module that one of our extras installs, and that module is not
    installed (a missing submodule of an installed package is another problem); otherwise ``""``."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        if name:
            for module, extra in _EXTRA_OF_MODULE.items():
                if (name == module or name.startswith(module + ".")) and not _installed(module):
                    return f' (`pip install "marl-bridges[{extra}]"` installs it)'
        error = error.__cause__ or error.__context__
    return ""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that does not import
        return False


class OpponentSpecError(MultiAgentEnvError):
    """An evaluation opponent that is not ``"random"`` or ``"mcts:N"`` with a positive ``N``."""


class VectorEnvError(MultiAgentEnvError):
    """Bad input to a vectorized env, or a failure in one of its sub-envs.

    ``index`` names the sub-env (None when the error concerns the whole vector) and
    ``remote_traceback`` holds the worker process's traceback when the sub-env ran in one.
    """

    def __init__(self, message: str, index: int | None = None, remote_traceback: str | None = None) -> None:
        self.index = index
        self.remote_traceback = remote_traceback
        super().__init__(message)


class ConfigError(MultiAgentEnvError):
    """A configuration value (of the trainer, or an env's config) that is unknown, of the wrong
    type or inconsistent."""


class UnsupportedEnvError(MultiAgentEnvError):
    """A foreign env or game that a bridge cannot represent; the message says why."""


class NotOurEnvError(UnsupportedEnvError, SpaceError):
    """An exporter (``to_aec``, ``to_parallel``, ``to_rllib``, ``to_gymnasium``) received
    something that is not a marl_core MultiAgentEnv. A :class:`SpaceError` too, which
    ``to_rllib`` and ``to_gymnasium`` raised for it before."""


class NotTheirEnvError(UnsupportedEnvError, SpaceError):
    """An importer (``from_rllib``, ``from_gymnasium``) received something that is not an env of
    the API it imports: the mirror of :class:`NotOurEnvError`, and a :class:`SpaceError` too,
    which the importers raised for it before."""


class ConformanceError(MultiAgentEnvError):
    """The conformance checker found errors (``raise_if_errors``) or got a bad request.

    Attributes:
        findings: the error findings, when raised by ``ConformanceReport.raise_if_errors()``.
    """

    def __init__(self, message: str, findings: Iterable[Any] = ()) -> None:
        self.findings = tuple(findings)
        super().__init__(message)


class TargetBuildError(ConformanceError):
    """The object handed to the checker is not an env, and no env could be built from it.

    Attributes:
        needs_arguments: it is a class or factory that cannot be built without arguments of its
            own (it needs some, or failed on the empty config it was given).
        env_method: the method of a foreign env (``"reset"``, ...) whose own code raised while
            ``bridges.wrap`` converted it (the error is the ``__cause__``), else None.
    """

    needs_arguments: bool = False
    env_method: str | None = None
