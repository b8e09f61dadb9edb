"""bridges: adapters between marl_core's MultiAgentEnv and other multi-agent APIs.

Each foreign API has one module with both directions. Heavy or optional imports (pettingzoo,
pyspiel, ray) happen when a bridge module is first used, never on ``import bridges``.
"""

from __future__ import annotations

from marl_core._lazy import lazy_exports

# name -> module that defines it; resolved lazily so `import bridges` stays light.
_EXPORTS: dict[str, str] = {
    "from_gymnasium": "bridges.gymnasium",
    "to_gymnasium": "bridges.gymnasium",
    "from_rllib": "bridges.rllib",
    "to_rllib": "bridges.rllib",
    "wrap": "bridges.wrapping",
    "OpenSpielEnv": "bridges.openspiel",
    "to_openspiel": "bridges.openspiel_game",
    "PettingZooEnv": "bridges.pettingzoo",
    "ParallelPettingZooEnv": "bridges.pettingzoo",
    "to_aec": "bridges.pettingzoo",
    "to_parallel": "bridges.pettingzoo",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
