"""The action checks of the PettingZoo bridges, with a fast path for the common cases.

Discrete actions of a plain integer type and Box actions of the exact dtype and shape are checked
inline, agents with equal bounds in one loop; everything else (and every failure) goes through
:func:`marl_core.spaces.check_action`, which raises with a precise message.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from marl_core.env import AgentID
from marl_core.spaces import check_action, mask_fits

_index = operator.index
_ndarray = np.ndarray
# Integer types that may take the fast path of action checks (those that cast safely to the
# Discrete space's dtype, as gymnasium requires); anything else takes the full check.
_INT_TYPES = (int, np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8)
# Box actions with at most this many entries are bounds-checked element by element in Python,
# which costs far less than numpy's per-call overhead on small arrays.
_SMALL_BOX = 64


class DiscreteBounds:
    """What the fast path needs to know about a Discrete action space."""

    __slots__ = ("high", "ints", "low")

    def __init__(self, space: gym.spaces.Discrete) -> None:
        self.ints = frozenset(t for t in _INT_TYPES if t is int or np.can_cast(t, space.dtype))
        self.low = int(space.start)
        self.high = self.low + int(space.n)

    def admits_all(self, actions: tuple[Any, ...]) -> bool:
        """True when every action is certainly in the space; False means "take the full check".

        A plain loop: on the small tuples of one step it beats set operations and numpy.
        """
        ints, low, high = self.ints, self.low, self.high
        for action in actions:  # noqa: SIM110 (all() over a generator costs more on this hot path)
            if type(action) not in ints or not low <= _index(action) < high:
                return False
        return True


class BoxBounds:
    """What the fast path needs to know about a Box action space."""

    __slots__ = ("dtype", "high", "highs", "low", "lows", "ndim", "shape", "size")

    def __init__(self, space: gym.spaces.Box) -> None:
        self.shape = space.shape
        self.ndim = len(space.shape)
        self.dtype = space.dtype
        self.size = int(space.low.size)
        small = self.size <= _SMALL_BOX
        # The bounds as Python numbers, flattened (small boxes only): exact for every numpy dtype.
        self.lows: list[Any] | None = space.low.ravel().tolist() if small else None
        self.highs: list[Any] = space.high.ravel().tolist() if small else []
        self.low = space.low
        self.high = space.high

    def admits(self, action: Any) -> bool:
        """True when ``action`` is certainly in the space; False means "take the full check".

        Exact ndarray type, shape and dtype (the very dtype object, as numpy shares one per
        built-in type), then the bounds; NaN fails every comparison, so it goes to the full check.
        """
        if type(action) is not np.ndarray or action.shape != self.shape or action.dtype is not self.dtype:
            return False
        lows = self.lows
        if lows is None:
            return bool((action >= self.low).all() and (action <= self.high).all())
        if self.size == 1:
            return lows[0] <= action.item() <= self.highs[0]
        values = action.ravel().tolist()
        return all(map(operator.le, lows, values)) and all(map(operator.le, values, self.highs))

    def admits_all(self, actions: tuple[Any, ...]) -> bool:
        """:meth:`admits` for every action; one-entry boxes (one per piston, say) in one loop.

        For those, ``item()`` raises unless the array has one entry, so with the right number of
        dimensions the shape is right.
        """
        if self.size != 1:
            return all(map(self.admits, actions))
        ndim, dtype, low, high, ndarray = self.ndim, self.dtype, self.lows[0], self.highs[0], _ndarray  # type: ignore[index]
        try:
            for action in actions:
                if type(action) is not ndarray or action.ndim != ndim or action.dtype is not dtype:
                    return False
                if not low <= action.item() <= high:
                    return False
        except ValueError:
            return False
        return True


Bounds = DiscreteBounds | BoxBounds


class ActionChecker:
    """Per-agent action validation with a fast path for the common cases.

    Discrete actions of a plain integer type and Box actions of the exact dtype and shape are
    checked inline; everything else (and every failure) goes through
    :func:`marl_core.spaces.check_action`, which raises with a precise message. Agents whose
    spaces have the same bounds share one bounds object.
    """

    __slots__ = ("_shared", "_space_of", "box", "check_legal", "discrete", "spaces")

    def __init__(self, space_of: Any, check_legal: bool) -> None:
        self._space_of = space_of
        self.check_legal = check_legal
        self.spaces: dict[AgentID, gym.Space] = {}
        self.discrete: dict[AgentID, DiscreteBounds] = {}
        self.box: dict[AgentID, BoxBounds] = {}
        self._shared: dict[tuple[Any, ...], Any] = {}

    def learn(self, agent_id: AgentID) -> gym.Space:
        """Look up and remember the action space of ``agent_id`` (and its fast-path bounds)."""
        space = self._space_of(agent_id)
        self.spaces[agent_id] = space
        if type(space) is gym.spaces.Discrete:
            key: tuple[Any, ...] = ("discrete", space.dtype, int(space.start), int(space.n))
            self.discrete[agent_id] = self._shared.get(key) or self._shared.setdefault(key, DiscreteBounds(space))
        elif type(space) is gym.spaces.Box:
            key = ("box", space.dtype, space.shape, space.low.tobytes(), space.high.tobytes())
            self.box[agent_id] = self._shared.get(key) or self._shared.setdefault(key, BoxBounds(space))
        return space

    def bounds(self, agent_id: AgentID) -> Bounds | None:
        """The fast-path bounds of ``agent_id``'s action space (None: it has none)."""
        if agent_id not in self.spaces:
            self.learn(agent_id)
        return self.discrete.get(agent_id) or self.box.get(agent_id)

    def __call__(self, agent_id: AgentID, action: Any, mask: np.ndarray | None) -> None:
        """Raise unless ``action`` is in the agent's space and (if checked) legal under ``mask``."""
        space = self.spaces.get(agent_id)
        if space is None:
            space = self.learn(agent_id)
        bounds = self.discrete.get(agent_id)
        if bounds is not None:
            if type(action) in bounds.ints:
                value = _index(action)  # numpy integers compare faster as Python ints
                if bounds.low <= value < bounds.high and (  # a mask of another size: check_action's to judge
                    mask is None or not self.check_legal or (mask_fits(mask, bounds.high - bounds.low)
                                                             and mask[value - bounds.low])
                ):
                    return
        else:
            box = self.box.get(agent_id)
            if box is not None and box.admits(action):
                return
        check_action(agent_id, space, action, mask if self.check_legal else None)


def admitter(
    groups: Mapping[Bounds, list[AgentID]],
) -> tuple[Callable[[Mapping[AgentID, Any]], tuple[Any, ...]], Callable[[tuple[Any, ...]], bool]]:
    """A getter of the actions of the agents in ``groups`` (a tuple, in one call; KeyError when
    one is missing) and a test that admits that tuple, group by group (agents sharing bounds).
    """
    order = [agent_id for agent_ids in groups.values() for agent_id in agent_ids]
    if len(order) > 1:
        get = operator.itemgetter(*order)
    else:
        (agent_id,) = order
        get = lambda action_dict: (action_dict[agent_id],)  # noqa: E731
    if len(groups) == 1:
        (bounds,) = groups
        return get, bounds.admits_all
    slices = []
    start = 0
    for bounds, agent_ids in groups.items():
        slices.append((bounds.admits_all, start, start + len(agent_ids)))
        start += len(agent_ids)

    def admits_all(actions: tuple[Any, ...]) -> bool:
        return all(admits(actions[begin:end]) for admits, begin, end in slices)

    return get, admits_all

