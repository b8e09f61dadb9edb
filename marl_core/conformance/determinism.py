"""Trajectory records, value comparison and the watch on the global random generators.

Trajectories are compared value by value (numpy arrays by shape, dtype and content, NaN equal to
NaN), never by truthiness of dict keys. The checker never seeds numpy's or Python's global
generator; it only reads their state before and after each call to see whether the env drew
from them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl_core.conformance.checks import Frame, names
from marl_core.conformance.collect import ENV_ERRORS, shown
from marl_core.spaces import MAX_DEPTH

SMALL_ARRAY_BYTES = 4096
"""Arrays up to this size are kept as copies in trajectory records; larger ones as a :class:`Digest`."""


@dataclass(frozen=True)
class Digest:
    """Stands for a large array in a trajectory record: equal digests mean equal arrays."""

    shape: tuple[int, ...]
    dtype: str
    hash: int

    def __repr__(self) -> str:
        return f"<array of shape {self.shape} and dtype {self.dtype}, digest {self.hash & 0xFFFFFFFF:08x}>"


def fingerprint(value: Any, depth: int = 0) -> Any:
    """Like :func:`snapshot`, but large arrays become a :class:`Digest` (records of image envs stay small)."""
    if isinstance(value, np.ndarray):
        if value.nbytes <= SMALL_ARRAY_BYTES or value.dtype.hasobject:  # objects (fields too): no digest of pointers
            return value.copy()
        return Digest(value.shape, value.dtype.str, hash(np.ascontiguousarray(value).tobytes()))
    if depth >= MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {k: fingerprint(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [fingerprint(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        return tuple(fingerprint(v, depth + 1) for v in value)
    return value


def same(a: Any, b: Any, depth: int = 0, seen: set[tuple[int, int]] | None = None) -> bool:
    """Whether two observations (or rewards, flags) are equal, arrays included, NaN equal to NaN.

    ``seen`` holds the pairs of objects already being compared by their attributes, so that
    objects referring to each other in a cycle are walked once."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        return _compare_or_identity(a, b) if a.dtype.hasobject else _same_arrays(a, b)  # objects' == may raise
    if depth >= MAX_DEPTH:  # not looked into, so not reported either
        return True
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[k], b[k], depth + 1, seen) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(
            same(x, y, depth + 1, seen) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating)) and a != a and b != b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # no single truth value (a torch tensor, a dataclass of arrays)
        return _same_as_arrays(a, b, depth, set() if seen is None else seen)


def _same_as_arrays(a: Any, b: Any, depth: int, seen: set[tuple[int, int]]) -> bool:
    """Array-likes of one type compared as numpy arrays; other objects by their attributes
    (a dataclass holding arrays, ``__slots__`` included), else by identity."""
    try:
        x, y = np.asarray(a), np.asarray(b)
    except Exception:
        x = y = None
    if x is not None and not x.dtype.hasobject:
        return _same_arrays(x, y)
    state_a, state_b = _state_of(a), _state_of(b)
    if not (state_a or state_b):
        return a is b
    if (id(a), id(b)) in seen:  # a cycle: this pair is being compared further up
        return True
    seen.add((id(a), id(b)))
    return same(state_a, state_b, depth + 1, seen)


def _state_of(value: Any) -> dict[str, Any]:
    """An object's attributes: its ``__dict__`` and the ``__slots__`` of its classes that are set."""
    state = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                state[name] = getattr(value, name)
    return state


def _same_arrays(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.names:  # a structured array, field by field: NaN in a float field equals itself
        return all(_same_arrays(a[name], b[name]) for name in a.dtype.names)
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _compare_or_identity(a: np.ndarray, b: np.ndarray) -> bool:
    """Arrays holding objects: numpy's comparison, else item by item (items holding arrays, whose
    ``==`` has no single truth value), objects that refuse ``==`` by identity."""
    try:
        return _same_arrays(a, b)
    except Exception:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return all(same(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist(), strict=True))


@dataclass(frozen=True)
class Record:
    """What one call returned, as compared across runs (infos are left out: they may hold timings)."""

    obs: dict
    rewards: dict
    terminateds: dict
    truncateds: dict

    @classmethod
    def of(cls, frame: Frame) -> Record:
        """The record of ``frame`` (observations copied, large arrays as digests)."""
        return cls(fingerprint(frame.obs), dict(frame.rewards), dict(frame.terminateds), dict(frame.truncateds))


def first_difference(expected: Record, actual: Record) -> tuple[str, Any] | None:
    """None when the records match; otherwise a sentence naming the first difference, and the
    agent it concerns (None when it concerns who is in a dict)."""
    if set(expected.obs) != set(actual.obs):
        return f"different agents in the obs dict (who acts): {names(expected.obs)} then {names(actual.obs)}", None
    for agent_id, value in expected.obs.items():
        if not same(value, actual.obs[agent_id]):
            path, first, second = _where_different(value, actual.obs[agent_id], "")
            at = f" at {path}" if path else ""
            text = f"observation of agent {shown(agent_id)} differs{at}: {shown(first, 70)} then {shown(second, 70)}"
            return text, agent_id
    for name in ("rewards", "terminateds", "truncateds"):
        first, second = getattr(expected, name), getattr(actual, name)
        if set(first) != set(second):
            return f"{name} name different agents: {names(first)} then {names(second)}", None
        for agent_id, value in first.items():
            if not same(value, second[agent_id]) and not _same_number(value, second[agent_id]):
                return f"{name}[{shown(agent_id)}] differs: {shown(value)} then {shown(second[agent_id])}", agent_id
    return None


def _where_different(a: Any, b: Any, path: str, depth: int = 0) -> tuple[str, Any, Any]:
    """The path (``["key"]``, ``[i]``) of the first differing part of two nested values."""
    if depth >= MAX_DEPTH:
        return path, a, b
    if isinstance(a, Mapping) and isinstance(b, Mapping) and a.keys() == b.keys():
        for key in a:
            if not same(a[key], b[key], depth + 1):
                return _where_different(a[key], b[key], f"{path}[{key!r}]", depth + 1)
    if isinstance(a, (list, tuple)) and type(a) is type(b) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            if not same(x, y, depth + 1):
                return _where_different(x, y, f"{path}[{index}]", depth + 1)
    if (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and a.ndim and a.size
            and a.dtype.kind in "biufc" and b.dtype.kind in "biufc"):  # numbers: elementwise, one value each
        with np.errstate(invalid="ignore"):
            differ = np.asarray(a != b)
            if a.dtype.kind in "fc" and b.dtype.kind in "fc":
                differ &= ~(np.isnan(a) & np.isnan(b))
        if differ.any():  # else only the dtypes differ: the arrays are the difference
            index = tuple(int(i) for i in np.argwhere(differ)[0])
            return f"{path}[{', '.join(map(str, index))}]", a[index].item(), b[index].item()
    return path, a, b


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except ENV_ERRORS:  # a user's object may raise anything; the checker must not
        return False


@dataclass
class Episode:
    """One explored episode: its seed, the actions sent and what each call returned.

    ``records[0]`` is the reset; ``actions[i]`` led to ``records[i + 1]``. ``draws[i]`` is the
    global-generator state after call ``i`` when that call drew from a global generator.
    """

    seed: int
    records: list[Record] = field(default_factory=list)
    actions: list[dict] = field(default_factory=list)
    draws: list[tuple | None] = field(default_factory=list)


def global_rng_state() -> tuple[Any, ...]:
    """A fingerprint of numpy's legacy global generator and Python's ``random`` (read-only)."""
    try:
        _, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        numpy_state: Any = (hash(keys.tobytes()), pos, has_gauss, gauss)
    except ValueError:  # someone replaced the global bit generator: compare its full state
        numpy_state = repr(np.random.get_state(legacy=False))
    return numpy_state, hash(random.getstate())


def drew(before: tuple[Any, ...], after: tuple[Any, ...]) -> str | None:
    """Which global generator changed between two fingerprints, or None."""
    which = [name for name, x, y in zip(("numpy's global RNG (np.random.*)", "Python's random module"), before, after, strict=True) if x != y]
    return " and ".join(which) or None
