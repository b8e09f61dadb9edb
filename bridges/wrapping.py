"""One entry point for every supported env: :func:`wrap`.

``wrap(obj)`` turns any supported object into our MultiAgentEnv, choosing the bridge from the
object's type. It imports a foreign package only when the object already comes from it: a class
of RLlib, PettingZoo or OpenSpiel can only exist once its package is imported, so ``wrap`` looks
in ``sys.modules`` before any ``isinstance`` check and never imports ray, pettingzoo or pyspiel
for an object that is not theirs.

``bridges.wrap`` is this function (the module is named ``wrapping`` so that no submodule
shadows it).

Example:
    >>> import gymnasium as gym
    >>> from bridges.wrapping import wrap
    >>> env = wrap(gym.make("CartPole-v1"))
    >>> env.possible_agents
    ['agent_0']
    >>> wrap(env) is env
    True
    >>> wrap(42)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    marl_core.errors.UnsupportedEnvError: cannot wrap builtins.int as a MultiAgentEnv; supported: ...
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from marl_core.env import MultiAgentEnv
from marl_core.errors import NotOurEnvError, UnsupportedEnvError, type_name

logger = logging.getLogger(__name__)

__all__ = ["SUPPORTED", "bridge_name", "require_multi_agent_env", "wrap"]


@dataclass(frozen=True)
class _Kind:
    """One kind of object :func:`wrap` accepts."""

    name: str
    description: str
    matches: Callable[[Any], bool]
    convert: Callable[[Any], MultiAgentEnv]


def _loaded(module: str) -> Any:
    """The module if something has imported it already, else None (nothing is imported here)."""
    return sys.modules.get(module)


def _is_ours(obj: Any) -> bool:
    return isinstance(obj, MultiAgentEnv)


def _is_rllib(obj: Any) -> bool:
    module = _loaded("ray.rllib.env.multi_agent_env")
    return module is not None and isinstance(obj, module.MultiAgentEnv)


def _from_rllib(obj: Any) -> MultiAgentEnv:
    from bridges.rllib import from_rllib

    return from_rllib(obj)


def _pettingzoo_base(name: str) -> type | None:
    module = _loaded("pettingzoo.utils.env")
    return getattr(module, name, None) if module is not None else None


def _is_aec(obj: Any) -> bool:
    base = _pettingzoo_base("AECEnv")
    return base is not None and isinstance(obj, base)


def _is_parallel(obj: Any) -> bool:
    base = _pettingzoo_base("ParallelEnv")
    return base is not None and isinstance(obj, base)


def _from_aec(obj: Any) -> MultiAgentEnv:
    from bridges.pettingzoo import PettingZooEnv

    return PettingZooEnv(obj)


def _from_parallel(obj: Any) -> MultiAgentEnv:
    from bridges.pettingzoo import ParallelPettingZooEnv

    return ParallelPettingZooEnv(obj)


def _is_spiel_game(obj: Any) -> bool:
    module = _loaded("pyspiel")
    return module is not None and isinstance(obj, module.Game)


def _from_spiel_game(obj: Any) -> MultiAgentEnv:
    from bridges.openspiel import OpenSpielEnv

    return OpenSpielEnv(obj)


def _is_gymnasium(obj: Any) -> bool:
    return isinstance(obj, gym.Env)


def _from_gymnasium(obj: Any) -> MultiAgentEnv:
    from bridges.gymnasium import from_gymnasium

    return from_gymnasium(obj)


SUPPORTED: tuple[_Kind, ...] = (
    _Kind("marl_core", "a marl_core MultiAgentEnv (returned unchanged)", _is_ours, lambda obj: obj),
    _Kind("rllib", "an RLlib MultiAgentEnv (bridges.rllib.from_rllib)", _is_rllib, _from_rllib),
    _Kind("pettingzoo-aec", "a PettingZoo AECEnv (bridges.pettingzoo.PettingZooEnv)", _is_aec, _from_aec),
    _Kind(
        "pettingzoo-parallel",
        "a PettingZoo ParallelEnv (bridges.pettingzoo.ParallelPettingZooEnv)",
        _is_parallel,
        _from_parallel,
    ),
    _Kind("openspiel", "a pyspiel.Game (bridges.openspiel.OpenSpielEnv)", _is_spiel_game, _from_spiel_game),
    _Kind(
        "gymnasium",
        "a single-agent gymnasium.Env (bridges.gymnasium.from_gymnasium)",
        _is_gymnasium,
        _from_gymnasium,
    ),
)
"""What :func:`wrap` accepts, checked in this order (RLlib's class is a ``gymnasium.Env`` too)."""


def bridge_name(obj: Any) -> str | None:
    """The name of the kind :func:`wrap` would use for ``obj`` (None: unsupported).

    >>> import gymnasium as gym
    >>> bridge_name(gym.make("CartPole-v1")), bridge_name("CartPole-v1")
    ('gymnasium', None)
    """
    for kind in SUPPORTED:
        if kind.matches(obj):
            return kind.name
    return None


def require_multi_agent_env(env: Any, exporter: str, gives: str) -> None:
    """Raise unless ``env`` is our MultiAgentEnv, as the exporters (``to_aec``, ``to_parallel``,
    ``to_rllib``, ``to_gymnasium``) need; for a foreign env the message names its bridge, or
    says that it already is what ``exporter`` gives (``gives``: the name of that kind in
    :data:`SUPPORTED`).

    Raises:
        NotOurEnvError: ``env`` is not a marl_core MultiAgentEnv (an UnsupportedEnvError and a
            SpaceError).
    """
    if isinstance(env, MultiAgentEnv):
        return
    kind = next((kind for kind in SUPPORTED if kind.matches(env)), None)
    received = type_name(env)
    if kind is None:
        hint = "; build one, or bridge a foreign env in with bridges.wrap(env)"
    elif kind.name == gives:
        hint = f"; it already is {kind.description.split(' (')[0]}: use it as it is"
    else:
        hint = f"; it is {kind.description}: bridge it in first (bridges.wrap(env) does)"
    raise NotOurEnvError(f"{exporter} takes a marl_core MultiAgentEnv, received {received}{hint}")


def wrap(obj: Any) -> MultiAgentEnv:
    """Our MultiAgentEnv for any supported object.

    Supported: our MultiAgentEnv (returned unchanged), an RLlib ``MultiAgentEnv``, a PettingZoo
    ``AECEnv`` or ``ParallelEnv``, a ``pyspiel.Game`` and a single-agent ``gymnasium.Env``.

    Raises:
        UnsupportedEnvError: ``obj`` is none of these; the message lists what is supported.
    """
    for kind in SUPPORTED:
        if kind.matches(obj):
            logger.debug("wrapping %s with the %s bridge", type(obj).__qualname__, kind.name)
            return kind.convert(obj)
    hint = ""
    if isinstance(obj, str):
        hint = " (a string: for an OpenSpiel game use pyspiel.load_game(name), for Gymnasium gymnasium.make(id))"
    elif callable(obj) and not (isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj)):
        hint = " (it is callable: call it to build the env, then wrap the result)"  # a partial, say
    supported = "; ".join(kind.description for kind in SUPPORTED)
    raise UnsupportedEnvError(f"cannot wrap {type_name(obj)} as a MultiAgentEnv; supported: {supported}{hint}")
