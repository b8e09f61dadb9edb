"""Turning what the user hands to the checker into an env, and more fresh envs of the same kind.

Accepted: an env instance (ours, or any object following the protocol); a class or zero-argument
factory (a constructor or function taking one ``config`` argument is called with ``{}`` when it
cannot be called without one); and foreign envs (PettingZoo, OpenSpiel, RLlib, Gymnasium), which
go through ``bridges.wrap`` (the one place the checker imports ``bridges``).
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marl_core.conformance.collect import ENV_ERRORS
from marl_core.env import MultiAgentEnv, accepts_config
from marl_core.errors import TargetBuildError

logger = logging.getLogger(__name__)

_SPACE_ATTRS = (("observation_spaces", "get_observation_space"), ("action_spaces", "get_action_space"))


@dataclass
class Target:
    """The env under test and how to get another fresh one.

    Attributes:
        env: the env the checker explores.
        name: how reports name the target.
        factory: builds a fresh env (None when there is no way to; see ``fresh_error``).
        picklable: the object that must survive a cloudpickle round trip (factory or instance).
        fresh_error: why no fresh env can be built, when ``factory`` is None.
        via: how ``bridges.wrap`` made the target a multi-agent env, and why ("": it is one).
    """

    env: Any
    name: str
    factory: Callable[[], Any] | None
    picklable: Any
    fresh_error: str | None = None
    via: str = ""


def missing_protocol(obj: Any) -> list[str]:
    """What ``obj`` lacks to be checked directly as a multi-agent env (empty: nothing)."""
    if isinstance(obj, MultiAgentEnv):
        return []
    # PettingZoo envs have look-alike attributes but other semantics (no "__all__", AEC turns);
    # RLlib's too: RLlib lists an agent in `agents` for the step it ends in, takes integer ids,
    # names its agents in _agent_ids on its old API stack, and from_rllib reads them as RLlib does.
    kind = _look_alike(obj)
    if kind is not None:
        return [f"not a {kind} env ({kind} envs go through bridges.wrap)"]
    missing = [name for name in ("reset", "step") if not callable(_probe(obj, name))]
    if _probe(obj, "possible_agents", missing=_MISSING) is _MISSING:
        missing.append("possible_agents")
    for attr, method in _SPACE_ATTRS:
        if _probe(obj, attr) is None and not callable(_probe(obj, method)):
            missing.append(f"{attr} or {method}()")
    return missing


_MISSING = object()


def _probe(obj: Any, name: str, missing: Any = None) -> Any:
    """``getattr(obj, name, missing)``, where a property that raises counts as present."""
    try:
        return getattr(obj, name, missing)
    except ENV_ERRORS:  # a broken property: the attribute exists; the checker reports the error later
        return True


def name_of(obj: Any) -> str:
    """``module.QualName`` of a class, function or (the type of) an instance, plus a short ``str(obj)``
    for foreign instances that describe themselves (e.g. ``pyspiel.Game kuhn_poker()``)."""
    target = obj if inspect.isclass(obj) or inspect.isroutine(obj) else type(obj)
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", repr(target))
    name = f"{module}.{qualname}" if module else qualname
    if target is type(obj) and not isinstance(obj, MultiAgentEnv) and type(obj).__str__ is not object.__str__:
        try:
            text = str(obj)
        except ENV_ERRORS:  # a broken __str__ does not stop the check
            text = ""
        if text and len(text) <= 80 and "\n" not in text:
            name += f" {text}"
    return name


def _is_instance_like(obj: Any) -> bool:
    return not inspect.isclass(obj) and callable(getattr(obj, "reset", None))


def _arguments(factory: Callable[..., Any]) -> tuple[Any, ...]:
    """What :func:`resolve` calls ``factory`` with: nothing, or an empty config (as RLlib does)."""
    try:
        inspect.signature(factory).bind()
    except TypeError:  # it needs arguments: one config at most
        if accepts_config(factory):
            return ({},)
        error = TargetBuildError(
            f"cannot call {name_of(factory)}: it needs arguments (signature "
            f"{inspect.signature(factory)}); pass a zero-argument factory, e.g. "
            f"`lambda: {getattr(factory, '__name__', 'make_env')}(...)`"
        )
        error.needs_arguments = True
        raise error from None
    except ValueError:  # no signature (builtins): try the plain call
        return ()
    return ()


def _optional_config(factory: Callable[..., Any]) -> bool:
    """Whether the first parameter of ``factory`` is a config (``config`` or ``env_config``, taken
    by position, as RLlib passes it) that defaults to None."""
    try:
        first = next(iter(inspect.signature(factory).parameters.values()), None)
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return first is not None and first.name in ("config", "env_config") and first.kind in positional and (
        first.default is None)


def _call_factory(factory: Callable[..., Any]) -> Any:
    return factory(*_arguments(factory))


def _wrap(obj: Any) -> Any:
    """Return ``obj`` as one of our envs: itself when it follows the protocol, else ``bridges.wrap(obj)``."""
    missing = missing_protocol(obj)
    if not missing:
        return obj
    try:
        import bridges

        wrap = getattr(bridges, "wrap", None)
    except ImportError as error:
        raise TargetBuildError(f"cannot load bridges.wrap to convert {name_of(obj)}: {error}") from error
    if wrap is None:
        raise TargetBuildError(
            f"{name_of(obj)} is not a multi-agent env{_lacking(obj, missing) or ' of ours'}, and "
            f"bridges.wrap (which converts PettingZoo, OpenSpiel, RLlib and Gymnasium envs) is not available"
        )
    try:
        wrapped = wrap(obj)
    except ENV_ERRORS as error:
        method = _foreign_method_of(error)
        if method is not None:  # the env is one bridges.wrap converts; its own code raised
            failure = TargetBuildError(f"{name_of(obj)}: its {method}() raised {type(error).__name__} while "
                                       f"bridges.wrap converted it: {error}")
            failure.env_method = method
            raise failure from error
        old_api = ""
        if "possible_agents" in missing and old_api_agent_ids(obj):
            old_api = ("; it names its agents in _agent_ids, as envs of RLlib's old API stack do: subclass RLlib's "
                       "MultiAgentEnv (bridges.wrap reads _agent_ids and single spaces), or set possible_agents "
                       "and per-agent spaces (observation_spaces, action_spaces)")
        raise TargetBuildError(
            f"{name_of(obj)} is not a multi-agent env{_lacking(obj, missing)}, and bridges.wrap cannot convert it: "
            f"{type(error).__name__}: {error}{old_api}"
        ) from error
    still_missing = missing_protocol(wrapped)
    if still_missing:
        raise TargetBuildError(f"bridges.wrap({name_of(obj)}) returned an object lacking {', '.join(still_missing)}")
    return wrapped


def _foreign_method_of(error: BaseException) -> str | None:
    """The name of the first function outside this project in ``error``'s traceback (the env's
    method that a bridge called, or a library wrapper's around it, which keeps its name), if the
    error went through one; None for special methods (``__getattr__``: an attribute read, not a
    method of the env)."""
    import bridges
    import marl_core

    ours = tuple(os.path.dirname(os.path.abspath(module.__file__)) + os.sep for module in (marl_core, bridges))
    for frame in traceback.extract_tb(error.__traceback__):
        if not os.path.abspath(frame.filename).startswith(ours):
            return None if frame.name.startswith("__") else frame.name
    return None


def old_api_agent_ids(env: Any) -> list[Any]:
    """The agent ids an env names in ``_agent_ids`` (RLlib's old API stack), sorted; [] if none."""
    try:
        ids = getattr(env, "_agent_ids", None)
        return sorted(ids, key=repr) if isinstance(ids, (set, frozenset, list, tuple)) else []
    except ENV_ERRORS:
        return []


def _look_alike(obj: Any) -> str | None:
    """"PettingZoo" or "RLlib" for their envs, whose attributes look like ours (RLlib's
    ``MultiAgentEnv`` subclasses: a gymnasium.Env in RLlib's examples is none); else None."""
    mro = type(obj).__mro__
    if any(cls.__module__.split(".")[0] == "pettingzoo" for cls in mro):
        return "PettingZoo"
    if any(cls.__name__ == "MultiAgentEnv" and cls.__module__.startswith("ray.rllib.") for cls in mro):
        return "RLlib"
    return None


def _lacking(obj: Any, missing: list[str]) -> str:
    """": it lacks ...", or nothing for PettingZoo and RLlib envs (which have look-alike attributes)."""
    return "" if _look_alike(obj) is not None else f": it lacks {', '.join(missing)}"


def _via(obj: Any, env: Any) -> str:
    """How ``obj`` became ``env`` (see :attr:`Target.via`)."""
    if env is obj:
        return ""
    via = f"checked through bridges.wrap, as {type(env).__name__}"
    from bridges.gymnasium import GymnasiumEnv

    if isinstance(env, GymnasiumEnv):  # the one conversion that may surprise: say why
        missing = ", ".join(missing_protocol(obj))
        via += f", a one-agent env ({type(obj).__name__} is a gymnasium.Env without {missing})"
    return via


def resolve(obj: Any) -> Target:
    """Build the env to check from ``obj`` (an env, a class or factory, or a foreign env).

    Raises:
        TargetBuildError: ``obj`` is not an env and none can be built from it (the message says why).
    """
    if _is_instance_like(obj) or not callable(obj):
        env = _wrap(obj)
        return Target(env=env, name=name_of(obj), factory=None, picklable=obj, via=_via(obj, env))
    arguments = _arguments(obj)
    try:
        built = obj(*arguments)
    except ENV_ERRORS as error:
        given = ""
        if arguments:  # RLlib's convention; the parameter may not be a config at all
            parameter = next(iter(inspect.signature(obj).bind({}).arguments))
            given = (f" (it was called with an empty config, {{}}, for its parameter {parameter!r}, as RLlib calls env "
                     f"classes; if it needs other arguments, pass a zero-argument factory, e.g. "
                     f"`lambda: {getattr(obj, '__name__', 'make_env')}(...)`)")
        elif _optional_config(obj):  # a config that defaults to None, as RLlib's example envs have
            name = getattr(obj, "__name__", "make_env")
            given = (f" (it was called with no argument; if it needs its config, as RLlib passes one: marl-check "
                     f"--config '{{}}', or check_env(lambda: {name}({{}})))")
        failure = TargetBuildError(
            f"calling {name_of(obj)} to build the env raised {type(error).__name__}: {error}{given}"
        )
        failure.needs_arguments = bool(arguments)
        raise failure from error
    env = _wrap(built)
    wraps = env is not built

    def factory() -> Any:
        fresh = _call_factory(obj)
        return _wrap(fresh) if wraps else fresh

    return Target(env=env, name=name_of(obj), factory=factory, picklable=obj, via=_via(built, env))


def copier(snapshot: bytes | None, instance: Any) -> tuple[Callable[[], Any] | None, str | None]:
    """A factory of copies of a given instance (from its pickle, else ``deepcopy``), or why not.

    Args:
        snapshot: the cloudpickle bytes of the untouched instance, when pickling worked.
        instance: the instance itself (copied with ``copy.deepcopy`` when there is no snapshot).
    """
    if snapshot is not None:
        import cloudpickle

        return (lambda: _wrap(cloudpickle.loads(snapshot))), None
    try:
        pristine = copy.deepcopy(instance)
    except ENV_ERRORS as error:
        return None, f"it cannot be copied either ({type(error).__name__}: {error})"

    def fresh() -> Any:
        return _wrap(copy.deepcopy(pristine))

    return fresh, None
