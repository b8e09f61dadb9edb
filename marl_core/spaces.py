"""Space helpers shared by the core, the bridges, the checker and the trainer.

One canonical action-mask form: a ``Dict`` observation with ``"observation"`` and
``"action_mask"`` (int8, 1 = legal). Everything here dispatches on the space type with
:func:`functools.singledispatch`, so new space types plug in without ``isinstance`` ladders.
"""

from __future__ import annotations

import collections
import copy
from collections.abc import Iterable, Mapping
from functools import singledispatch
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from marl_core.errors import (
    ActionDictError,
    EnvContractError,
    IllegalActionError,
    InvalidActionError,
    MissingActionError,
    NoLegalActionError,
    SpaceError,
    UnexpectedActionError,
    a_type,
    short_repr,
    with_article,
)

if TYPE_CHECKING:
    from marl_core.env import AgentID

OBS_KEY = "observation"
MASK_KEY = "action_mask"


# Action masks -------------------------------------------------------------------------------


def masked_space(observation_space: spaces.Space, num_actions: int) -> spaces.Dict:
    """The canonical masked observation space around ``observation_space``."""
    return spaces.Dict(
        {OBS_KEY: observation_space, MASK_KEY: spaces.Box(0, 1, (num_actions,), np.int8)}
    )


def is_masked(space: spaces.Space) -> bool:
    """Whether ``space`` is a Dict observation space carrying an ``"action_mask"``."""
    return isinstance(space, spaces.Dict) and MASK_KEY in space.spaces


def action_mask_of(observation: Any) -> np.ndarray | None:
    """The action mask inside ``observation``, or None when it has none.

    Gymnasium's form of a MultiDiscrete mask, a tuple of one array per dimension, comes back
    flat (the dimensions' masks one after another, the canonical form). A value numpy cannot
    make one array of comes back as an object array, which fits no action space: checks do not
    apply it, and the checker's ``masks.valid`` names it.
    """
    if not (isinstance(observation, Mapping) and MASK_KEY in observation):
        return None
    mask = observation[MASK_KEY]
    if type(mask) is np.ndarray:
        return mask
    try:
        return _mask_array(mask)
    except ValueError:  # ragged
        shell = np.empty(1, dtype=object)
        shell[0] = mask
        return shell


def _mask_array(mask: Any) -> np.ndarray:
    """``mask`` as one array: gymnasium's tuple of per-dimension arrays (a MultiDiscrete mask)
    flat, one after another; anything else as numpy reads it (ValueError: ragged)."""
    if isinstance(mask, tuple) and mask and all(isinstance(part, np.ndarray) and part.ndim == 1 for part in mask):
        return np.concatenate(mask)
    return np.asarray(mask)


# One entry per slot of a Tuple action space: a slot's mask, None (that slot has none) or,
# for a slot that is itself a group, its own SlotMasks.
SlotMasks = tuple[Any, ...]


def action_masks_of(observation: Any) -> np.ndarray | SlotMasks | None:
    """Every mask that governs the action of an agent that sees ``observation``.

    The canonical top-level mask, or, for a tuple of member observations (a grouped agent,
    see :class:`~marl_core.grouping.GroupAgentsWrapper`), the masks of each slot, read the
    same way (so groups of groups nest); None when there is no mask. :func:`check_action`
    takes either form.
    """
    mask = action_mask_of(observation)
    if mask is not None or type(observation) is not tuple:
        return mask
    slots = tuple(action_masks_of(item) for item in observation)
    return slots if any(slot is not None for slot in slots) else None


def action_mask_size(action_space: spaces.Space) -> int | None:
    """How many entries a mask for ``action_space`` has (None: masks do not apply)."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return None


MAX_DEPTH = 64
"""Containers nested deeper than this (a dict that holds itself) are not looked into: kept as
they are by :func:`snapshot` (and in the checker's records), and not compared."""


def snapshot(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` deep enough that later in-place changes to the original do not reach it."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if depth >= MAX_DEPTH:
        return value
    if isinstance(value, dict):
        items = {k: snapshot(v, depth + 1) for k, v in value.items()}
        if type(value) is dict:
            return items
        try:  # an OrderedDict or defaultdict stays one (with its default factory)
            copied = copy.copy(value)
            copied.update(items)
            return copied
        except Exception:
            return items
    if isinstance(value, list):
        return [snapshot(v, depth + 1) for v in value]
    if isinstance(value, tuple):
        items = [snapshot(v, depth + 1) for v in value]
        if all(new is old for new, old in zip(items, value, strict=True)):  # a copy would hold the same objects
            return value
        if type(value) is tuple:
            return tuple(items)
        try:  # a namedtuple or other tuple subclass stays one, without calling its own constructor
            copied = tuple.__new__(type(value), items)
            if hasattr(value, "__dict__"):  # attributes a subclass keeps beside its items
                copied.__dict__.update(value.__dict__)
            return copied
        except Exception:
            return tuple(items)
    if isinstance(value, collections.deque):
        return collections.deque((snapshot(v, depth + 1) for v in value), maxlen=value.maxlen)
    if isinstance(value, (set, bytearray)):  # a set's items are hashable: not changed in place
        return copy.copy(value)
    return value


def mask_from_legal(legal: Iterable[int], size: int) -> np.ndarray:
    """An int8 mask of ``size`` entries with 1 exactly at ``legal``."""
    mask = np.zeros(size, dtype=np.int8)
    mask[list(legal)] = 1
    return mask


def mask_problem(mask: np.ndarray, size: int, space: spaces.Space) -> str | None:
    """What keeps ``mask`` from being a flat action mask of ``size`` entries, each 0 or 1, for the
    action space ``space`` (None: nothing)."""
    if mask.shape != (size,):
        return f"an action_mask of shape {mask.shape}, but its action space {space} needs ({size},)"
    if mask.dtype.kind not in "biuf" or not np.isin(mask, (0, 1)).all():
        return f"an action_mask with values other than 0 and 1 (dtype {mask.dtype})"
    return None


def mask_from_info(agent_id: AgentID, value: Any, space: spaces.Space) -> np.ndarray:
    """A new int8 array of the action mask an env put in ``agent_id``'s info, for its Discrete
    or MultiDiscrete action ``space`` (a bridge moves it into the observation and checks actions
    against it: it must not share the env's array). Gymnasium's form of a MultiDiscrete mask, a
    tuple of one array per dimension, is taken flat.

    Raises:
        EnvContractError: ``value`` is not a flat mask with one entry per action, each 0 or 1
            (cast as it is, it would allow or forbid other actions than the env means).
    """
    try:
        array = _mask_array(value)
        problem = mask_problem(array, int(action_mask_size(space) or 0), space)
    except (TypeError, ValueError):  # a ragged list, say
        problem = "an action_mask that is not an array"
    if problem:
        raise EnvContractError(f"agent {agent_id!r} got {problem} in its info: {short_repr(value)}")
    return array.astype(np.int8)


# Membership with a diagnosis ----------------------------------------------------------------


def why_not_contained(space: spaces.Space, value: Any, path: str = "") -> str | None:
    """None when ``value`` is in ``space``; otherwise a sentence naming the offending sub-space.

    The path uses ``["key"]`` for Dict and ``[i]`` for Tuple members, and the sentence says what
    the dtype or shape should have been, e.g. ``at ["observation"]: shape (3,) but the space
    needs (4,)``.
    """
    return _why(space, value, path)


def _where(path: str) -> str:
    return f"at {path}: " if path else ""


@singledispatch
def _why(space: spaces.Space, value: Any, path: str) -> str | None:
    try:
        ok = space.contains(value)
    except Exception as error:  # a foreign space may raise on odd values
        return f"{_where(path)}{type(error).__name__}: {error} checking {value!r} against {space}"
    return None if ok else f"{_where(path)}{short_repr(value)} is not in {space}"


@_why.register
def _(space: spaces.Box, value: Any, path: str) -> str | None:
    if isinstance(value, np.generic) and not space.shape:  # what numpy arithmetic on a 0-d array gives
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        if isinstance(value, (list, tuple)) or np.isscalar(value):
            return (
                f"{_where(path)}{a_type(value)} where the space needs a numpy array of "
                f"dtype {space.dtype} and shape {space.shape}"
            )
        return f"{_where(path)}{a_type(value)} where the space needs a numpy array"
    if value.shape != space.shape:
        return f"{_where(path)}shape {value.shape} but the space needs {space.shape}"
    if not np.can_cast(value.dtype, space.dtype):
        return f"{_where(path)}dtype {value.dtype} but the space needs {space.dtype}"
    if np.issubdtype(value.dtype, np.floating):
        finite = np.isfinite(value)
        if not finite.all():  # the rare case: find what is wrong
            unbounded = np.isinf(space.low) | np.isinf(space.high)
            for what, bad in (("NaN", np.isnan(value)), ("infinity", ~(finite | unbounded))):
                found = np.argwhere(bad)
                if len(found):
                    at = f" at index {tuple(int(i) for i in found[0])}" if value.ndim else ""
                    where = " where the space is bounded" if what == "infinity" else ""
                    return f"{_where(path)}contains {what}{at}{where}"
    if not space.contains(value):
        below = np.argwhere(value < space.low)
        above = np.argwhere(value > space.high)
        where = below[0] if len(below) else above[0] if len(above) else None
        if where is not None:
            index = tuple(int(i) for i in where)
            return (
                f"{_where(path)}value {value[index].item()!r} at index {index} is outside "
                f"[{space.low[index].item()!r}, {space.high[index].item()!r}]"
            )
        return f"{_where(path)}{short_repr(value)} is not in {space}"
    return None


@_why.register
def _(space: spaces.Discrete, value: Any, path: str) -> str | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, np.ndarray)):
        return f"{_where(path)}{a_type(value)} ({value!r}) where the space needs an integer in {space}"
    if isinstance(value, np.ndarray) and (value.shape != () or not np.issubdtype(value.dtype, np.integer)):
        return f"{_where(path)}an array of shape {value.shape} and dtype {value.dtype} where {space} needs an integer"
    if isinstance(value, (np.integer, np.ndarray)) and not np.can_cast(value.dtype, space.dtype):
        return (
            f"{_where(path)}{with_article(str(value.dtype))} ({value!r}), which does not cast safely to {space}'s dtype "
            f"{space.dtype}"
        )
    try:
        inside = space.contains(value)
    except OverflowError:  # a Python int beyond the space's integer type
        inside = False
    if not inside:
        return f"{_where(path)}{int(value)} is outside {space} (valid: {space.start}..{space.start + space.n - 1})"
    return None


@_why.register
def _(space: spaces.MultiDiscrete, value: Any, path: str) -> str | None:
    array = np.asarray(value)
    if array.shape != space.shape:
        return f"{_where(path)}shape {array.shape} but the space needs {space.shape}"
    if not np.issubdtype(array.dtype, np.integer):
        return f"{_where(path)}dtype {array.dtype} but the space needs integers"
    if not np.can_cast(array.dtype, space.dtype):
        return f"{_where(path)}dtype {array.dtype} but the space needs {space.dtype}"
    if not space.contains(array):
        return f"{_where(path)}{short_repr(value)} is outside {space}"
    return None


@_why.register
def _(space: spaces.Dict, value: Any, path: str) -> str | None:
    if not isinstance(value, Mapping):
        return f"{_where(path)}{a_type(value)} where the space needs a dict"
    missing = [k for k in space.spaces if k not in value]
    extra = [k for k in value if k not in space.spaces]
    if missing or extra:
        return f"{_where(path)}keys {sorted(map(str, value))} but the space has {sorted(map(str, space.spaces))}"
    for key, sub in space.spaces.items():
        reason = _why(sub, value[key], f"{path}[{key!r}]")
        if reason:
            return reason
    return None


@_why.register
def _(space: spaces.Tuple, value: Any, path: str) -> str | None:
    if isinstance(value, list):
        return f"{_where(path)}a list of {len(value)} where the space needs a tuple of {len(space)}"
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return f"{_where(path)}an array of {len(value)} rows where the space needs a tuple of {len(space)}"
    if not isinstance(value, tuple):
        return f"{_where(path)}{a_type(value)} where the space needs a tuple of {len(space)}"
    if len(value) != len(space):
        return f"{_where(path)}a tuple of {len(value)} where the space needs {len(space)}"
    for index, (sub, item) in enumerate(zip(space.spaces, value, strict=True)):
        reason = _why(sub, item, f"{path}[{index}]")
        if reason:
            return reason
    return None


# Actions ------------------------------------------------------------------------------------


def check_action(
    agent_id: AgentID, space: spaces.Space, action: Any, mask: np.ndarray | SlotMasks | None = None
) -> None:
    """Raise unless ``action`` is in ``space`` and, for Discrete spaces, allowed by ``mask``.

    A Tuple space takes a list or a numpy array (its rows) as well as a tuple, as grouped
    agents (:class:`~marl_core.grouping.GroupAgentsWrapper`) and gymnasium's ``contains`` do.
    For a Tuple space, ``mask`` may hold masks per slot (see :func:`action_masks_of`): each
    Discrete slot's action must be legal under its mask, except in a slot whose mask allows
    nothing, which belongs to a member that does not act now (the group ignores that slot).

    Raises:
        InvalidActionError: the action is not in the space.
        IllegalActionError: the action (or a slot's action) is in the space but masked out.
    """
    reason = why_action_not_contained(space, action)
    if reason is not None:
        raise InvalidActionError(agent_id, f"an action in {space}", action, reason)
    if mask is not None:
        _check_masks(agent_id, space, action, mask, action, "")


# Integer types a Discrete (int64) space takes as they are (np.uint64 does not cast safely).
_INTEGERS = frozenset({int, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32})


def surely_valid_action(space: spaces.Space, action: Any, mask: np.ndarray | SlotMasks | None = None) -> bool:
    """A fast check of the common cases (a Discrete action of a plain integer type, a Box action
    of the space's dtype and shape); False means "ask :func:`check_action`", not "invalid"."""
    if type(space) is spaces.Discrete:
        if type(action) not in _INTEGERS or type(mask) is tuple or space.dtype != np.int64:
            return False
        offset = int(action) - int(space.start)
        return 0 <= offset < space.n and (mask is None or (mask_fits(mask, space.n) and bool(mask[offset])))
    if type(space) is spaces.Box:
        return (
            type(action) is np.ndarray
            and action.dtype == space.dtype
            and action.shape == space.shape
            and bool(((action >= space.low) & (action <= space.high)).all())
        )
    return False


def why_action_not_contained(space: spaces.Space, action: Any, path: str = "") -> str | None:
    """:func:`why_not_contained` for an action: a Tuple space's value may also be a list or a
    numpy array (its rows), as :func:`check_action` takes it."""
    reason = why_not_contained(space, action, path)
    if reason is not None and isinstance(space, (spaces.Tuple, spaces.Dict)):  # lists or arrays for tuples?
        reason = why_not_contained(space, _lists_as_tuples(space, action), path)
    return reason


def mask_fits(mask: Any, size: int) -> bool:
    """Whether ``mask`` is a flat mask of ``size`` entries: only such a mask says which action
    is which (checks ignore, and samplers do not draw from, any other)."""
    if type(mask) is np.ndarray:  # the common case, on hot paths: no np.ndim call
        return mask.ndim == 1 and len(mask) == size
    return bool(np.ndim(mask) == 1 and len(mask) == size)


def _check_masks(
    agent_id: AgentID, space: spaces.Space, action: Any, mask: np.ndarray | SlotMasks, whole: Any, path: str,
    member: AgentID | None = None,
) -> None:
    """Raise unless ``action`` (at ``path`` in the agent's action ``whole``) is legal under ``mask``;
    ``member``: the group member whose slot ``path`` starts at, named in the error.

    A mask whose size does not fit the space is not applied (the conformance checker's
    ``masks.valid`` names it): it says nothing certain about which action is which.
    """
    if type(mask) is not tuple:
        owner = f" (member {member!r})" if member is not None else ""
        where = f"in slot {path}{owner} of {short_repr(whole)}, masked out by that slot's action_mask"
        if (isinstance(space, spaces.Discrete) and mask_fits(mask, space.n)
                and not mask[int(action) - int(space.start)]):
            legal = [int(i) + int(space.start) for i in np.flatnonzero(mask)]
            raise IllegalActionError(agent_id, action, legal, hint=where if path else "masked out by its action_mask")
        if isinstance(space, spaces.MultiDiscrete) and mask_fits(mask, int(space.nvec.sum())):
            # One mask per dimension, concatenated (see action_mask_size).
            flat, sizes, starts = np.asarray(mask).reshape(-1), space.nvec.reshape(-1), np.asarray(space.start).reshape(-1)
            offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            if not flat[offsets + np.asarray(action).reshape(-1) - starts].all():
                legal = [[int(k) + int(start) for k in np.flatnonzero(flat[o : o + n])]
                         for o, n, start in zip(offsets, sizes, starts, strict=True)]
                raise IllegalActionError(agent_id, action, legal, hint=(where if path else
                                         "masked out by its action_mask, per dimension"))
    elif isinstance(space, spaces.Tuple) and len(mask) == len(space.spaces):
        for slot, (sub, item, slot_mask) in enumerate(zip(space.spaces, tuple_slots(space, action), mask, strict=True)):
            if slot_mask is not None and (type(slot_mask) is tuple or np.any(slot_mask)):
                _check_masks(agent_id, sub, item, slot_mask, whole, f"{path}[{slot}]", member)


def _lists_as_tuples(space: spaces.Space, action: Any) -> Any:
    """``action`` with the lists and arrays it holds at Tuple spaces read as tuples (for checking only)."""
    if isinstance(space, spaces.Tuple) and is_sequence_of(action, len(space.spaces)):
        return tuple(_lists_as_tuples(sub, item) for sub, item in zip(space.spaces, tuple_slots(space, action), strict=True))
    if isinstance(space, spaces.Dict) and isinstance(action, Mapping):
        return {key: _lists_as_tuples(space.spaces[key], item) if key in space.spaces else item
                for key, item in action.items()}
    return action


def is_sequence_of(value: Any, length: int) -> bool:
    """True for a tuple, list or numpy array (of at least one dimension) of ``length`` items:
    the forms a Tuple space's value takes, as in gymnasium's ``Tuple.contains``."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1 and len(value) == length
    return isinstance(value, (tuple, list)) and len(value) == length


def tuple_slots(space: spaces.Tuple, action: Any) -> tuple[Any, ...]:
    """The slots of a Tuple space's value given as a tuple, a list or a numpy array.

    An array's rows are its slots, as in gymnasium's ``Tuple.contains``; a row for a Box slot
    stays an array (of shape () for a Box of shape ()), as a Box value must be.
    """
    if isinstance(action, np.ndarray) and action.dtype != object:
        return tuple(action[i, ...] if isinstance(sub, spaces.Box) else action[i] for i, sub in enumerate(space.spaces))
    return tuple(action)


def check_action_dict(env: Any, action_dict: Mapping[AgentID, Any], acting: Iterable[AgentID]) -> None:
    """Raise unless ``action_dict`` has exactly one valid action per agent in ``acting``.

    Args:
        env: the env whose ``get_action_space(agent_id)`` gives each space.
        action_dict: the actions received.
        acting: the agents asked to act (the keys of the last observation dict).
    """
    acting = list(acting)
    check_acting(action_dict, acting)
    for agent_id in acting:
        check_action(agent_id, env.get_action_space(agent_id), action_dict[agent_id])


def check_acting(action_dict: Mapping[AgentID, Any], acting: Iterable[AgentID]) -> None:
    """Raise unless ``action_dict`` names exactly the agents in ``acting`` (values unchecked).

    Raises:
        ActionDictError: ``action_dict`` is not a dict (a Mapping).
        UnexpectedActionError: an action for an agent not asked to act.
        MissingActionError: an agent asked to act without an action.
    """
    acting = list(acting)
    if not isinstance(action_dict, Mapping):
        raise ActionDictError(action_dict, acting)
    acting_set = set(acting)
    unexpected = [a for a in action_dict if a not in acting_set]
    if unexpected:
        raise UnexpectedActionError(unexpected, acting)
    missing = [a for a in acting if a not in action_dict]
    if missing:
        raise MissingActionError(missing, list(action_dict))


# Seeded sampling ----------------------------------------------------------------------------


def sample_action(
    space: spaces.Space,
    rng: np.random.Generator,
    mask: np.ndarray | None = None,
    agent_id: AgentID | None = None,
) -> Any:
    """A random action from ``space`` drawn with ``rng`` (never the space's own RNG).

    With ``mask`` (Discrete: one entry per action; MultiDiscrete: the per-dimension masks
    concatenated), only legal actions are drawn; a mask that allows nothing (in some dimension)
    is a :class:`~marl_core.errors.NoLegalActionError` (an ``IllegalActionError``). A mask that does not fit the space is not applied, as
    :func:`check_action` does not apply it. Discrete actions come in the space's dtype.
    """
    if type(mask) is tuple:  # per-slot masks, for a Tuple space only (as check_action reads them)
        if isinstance(space, spaces.Tuple) and len(mask) == len(space.spaces):
            # A slot whose mask allows nothing belongs to a member that does not act now: any action.
            return tuple(sample_action(sub, rng, slot if slot is not None and np.any(slot) else None, agent_id)
                         for sub, slot in zip(space.spaces, mask, strict=True))
        mask = None
    if mask is not None:
        mask = np.asarray(mask)
        if isinstance(space, spaces.Discrete) and mask_fits(mask, space.n):
            legal = np.flatnonzero(mask)
            if len(legal) == 0:
                raise NoLegalActionError(agent_id)
            return space.dtype.type(space.start + legal[rng.integers(len(legal))])
        if isinstance(space, spaces.MultiDiscrete) and mask_fits(mask, int(space.nvec.sum())):
            out, offset = [], 0
            for dimension, (n, start) in enumerate(zip(space.nvec.flat, space.start.flat, strict=True)):
                legal = np.flatnonzero(mask[offset : offset + n])
                offset += n
                if len(legal) == 0:
                    raise NoLegalActionError(agent_id, f" in dimension {dimension}")
                out.append(start + legal[rng.integers(len(legal))])
            return np.asarray(out, dtype=space.dtype).reshape(space.shape)
    return _sample(space, rng)


def sample_action_for(
    space: spaces.Space, observation: Any, rng: np.random.Generator, agent_id: AgentID | None = None
) -> Any:
    """A random legal action for an agent that sees ``observation``.

    Reads the mask where the observation carries one: at the top level (the canonical form), or
    per slot for a Tuple action space whose observation is a tuple of member observations (grouped
    agents), so every member of a group gets a legal action. A slot whose mask allows no action
    belongs to a member that does not act now (it has ended, or has not appeared yet); the group
    ignores that slot, so it gets any action of its space.
    """
    mask = action_mask_of(observation)
    if mask is not None:
        return sample_action(space, rng, mask, agent_id)
    if isinstance(space, spaces.Tuple) and isinstance(observation, tuple) and len(observation) == len(space):
        slots = []
        for sub, item in zip(space.spaces, observation, strict=True):
            slot_mask = action_mask_of(item)
            if slot_mask is not None and not np.any(slot_mask):
                slots.append(sample_action(sub, rng))
            else:
                slots.append(sample_action_for(sub, item, rng, agent_id))
        return tuple(slots)
    return sample_action(space, rng, None, agent_id)


@singledispatch
def _sample(space: spaces.Space, rng: np.random.Generator) -> Any:
    # Seeding the env's own space objects would change what the env draws from them: a copy is
    # seeded instead. A space that cannot be copied (it holds a lock, say) is seeded itself and
    # the generators of the spaces found in it are put back afterwards.
    seed = int(rng.integers(2**31 - 1))
    try:
        own = copy.deepcopy(space)
    except Exception:  # any object may refuse to be copied
        generators = [(each, each.__dict__.get("_np_random")) for each in _space_tree(space)]
        try:
            space.seed(seed)
            return space.sample()
        finally:
            for each, generator in generators:
                each._np_random = generator
    own.seed(seed)
    return own.sample()


def _space_tree(space: spaces.Space) -> list[spaces.Space]:
    """``space`` and the spaces it holds in its attributes, at any depth of dicts, lists and
    tuples (Dict, Tuple, Sequence, Graph, OneOf and custom spaces); each once."""
    found: dict[int, spaces.Space] = {}
    pending: list[Any] = [space]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        elif isinstance(item, spaces.Space) and id(item) not in found:
            found[id(item)] = item
            pending.extend(vars(item).values())
    return list(found.values())


@_sample.register
def _(space: spaces.Discrete, rng: np.random.Generator) -> Any:
    return space.dtype.type(space.start + rng.integers(space.n))


@_sample.register
def _(space: spaces.MultiDiscrete, rng: np.random.Generator) -> Any:
    return (space.start + rng.integers(0, space.nvec)).astype(space.dtype)


@_sample.register
def _(space: spaces.MultiBinary, rng: np.random.Generator) -> Any:
    return rng.integers(0, 2, size=space.shape, dtype=space.dtype)


@_sample.register
def _(space: spaces.Box, rng: np.random.Generator) -> Any:
    low, high = space.low, space.high
    if np.issubdtype(space.dtype, np.integer):
        # An unbounded side (stored as the dtype's extreme) draws within 2**15 of the other side or
        # of 0; Python ints (object arrays) so nothing overflows on the way.
        info = np.iinfo(space.dtype)
        low, high = low.astype(object), high.astype(object)
        low = np.where(space.bounded_below, low, np.maximum(info.min, np.minimum(high, 0) - 2**15))
        high = np.where(space.bounded_above, high, np.minimum(info.max, np.maximum(low, 0) + 2**15))
        return rng.integers(low.astype(space.dtype), high.astype(space.dtype), size=space.shape, dtype=space.dtype,
                            endpoint=True)
    bounded = space.bounded_below & space.bounded_above
    value = np.where(bounded, rng.uniform(np.where(bounded, low, 0), np.where(bounded, high, 1)), 0.0)
    only_low = space.bounded_below & ~space.bounded_above
    only_high = ~space.bounded_below & space.bounded_above
    free = ~space.bounded_below & ~space.bounded_above
    value = np.where(only_low, low + rng.exponential(size=space.shape), value)
    value = np.where(only_high, high - rng.exponential(size=space.shape), value)
    value = np.where(free, rng.normal(size=space.shape), value)
    return value.astype(space.dtype)


@_sample.register
def _(space: spaces.Tuple, rng: np.random.Generator) -> Any:
    return tuple(_sample(sub, rng) for sub in space.spaces)


@_sample.register
def _(space: spaces.Dict, rng: np.random.Generator) -> Any:
    return {key: _sample(sub, rng) for key, sub in space.spaces.items()}


# JSON form of spaces (checkpoints keep their configs as JSON, never pickles) --------------------


def _array_json(array: np.ndarray, bounded: np.ndarray) -> Any:
    """Box bounds as JSON: one value when all entries are equal, else a flat list; unbounded
    entries are ``"inf"`` / ``"-inf"`` (integer boxes store them as the dtype's extremes)."""
    pairs = zip(array.ravel(), bounded.ravel(), strict=True)
    values = [_number_json(x) if ok else ("-inf" if x < 0 else "inf") for x, ok in pairs]
    if values and all(v == values[0] for v in values):
        return values[0]
    return values


def _number_json(value: Any) -> Any:
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)  # "inf", "-inf", "nan": JSON has no such numbers
    return value


def _array_from_json(data: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """Box bounds from :func:`_array_json`: a scalar (Box broadcasts it) or an array of ``shape``."""
    if isinstance(data, str):  # an unbounded side: a scalar infinity, which gymnasium maps for any dtype
        return float(data)
    if not isinstance(data, list):
        return np.full(shape, data, dtype=dtype)
    values = [float(x) if isinstance(x, str) else x for x in data]
    # An integer box with unbounded entries: a float array, whose infinities gymnasium understands.
    infinite = any(isinstance(x, float) and not np.isfinite(x) for x in values)
    return np.asarray(values, dtype=np.float64 if infinite and dtype.kind != "f" else dtype).reshape(shape)


def same_layout(space: spaces.Space, other: spaces.Space) -> bool:
    """Whether values of ``space`` fit where a model built for ``other`` reads its values: the
    same space up to Box bounds and to Box dtypes that cast safely to ``other``'s (a uint8 Box
    is an image either way or neither); Dict and Tuple member by member.

    Example:
        >>> same_layout(spaces.Box(0, 1, (3,)), spaces.Box(-5, 5, (3,))), same_layout(spaces.Discrete(2), spaces.Discrete(3))
        (True, False)
    """
    if isinstance(space, spaces.Box) and isinstance(other, spaces.Box):
        return (
            space.shape == other.shape
            and (space.dtype == np.uint8) == (other.dtype == np.uint8)
            and bool(np.can_cast(space.dtype, other.dtype, "safe"))
        )
    if isinstance(space, spaces.Dict) and isinstance(other, spaces.Dict):
        return space.spaces.keys() == other.spaces.keys() and all(
            same_layout(sub, other.spaces[key]) for key, sub in space.spaces.items()
        )
    if isinstance(space, spaces.Tuple) and isinstance(other, spaces.Tuple):
        return len(space) == len(other) and all(
            same_layout(sub, other_sub) for sub, other_sub in zip(space.spaces, other.spaces, strict=True)
        )
    return bool(space == other)


def space_to_json(space: spaces.Space) -> dict[str, Any] | None:
    """A JSON-safe dict describing ``space`` (Box, Discrete, MultiDiscrete, MultiBinary, Text,
    Tuple and Dict, nested); None when a part of it has no JSON form."""
    if isinstance(space, spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": space.dtype.str,
                "low": _array_json(space.low, space.bounded_below), "high": _array_json(space.high, space.bounded_above)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(),
                "dtype": space.dtype.str}
    if isinstance(space, spaces.MultiBinary):
        # An int n and a one-entry shape make spaces that gymnasium does not call equal.
        return {"type": "MultiBinary", "n": space.n if isinstance(space.n, int) else list(space.shape)}
    if isinstance(space, spaces.Text):
        return {"type": "Text", "max_length": space.max_length, "min_length": space.min_length,
                "charset": "".join(sorted(space.character_set))}
    if isinstance(space, spaces.Tuple):
        parts = [space_to_json(sub) for sub in space.spaces]
        return None if any(part is None for part in parts) else {"type": "Tuple", "spaces": parts}
    if isinstance(space, spaces.Dict):
        if not all(isinstance(key, (str, int)) for key in space.spaces):
            return None
        pairs = [[key, space_to_json(sub)] for key, sub in space.spaces.items()]  # pairs: order and key types
        return None if any(part is None for _, part in pairs) else {"type": "Dict", "spaces": pairs}
    return None


def space_from_json(data: Mapping[str, Any]) -> spaces.Space:
    """The space that :func:`space_to_json` described."""
    kind = data["type"]
    if kind == "Box":
        dtype, shape = np.dtype(data["dtype"]), tuple(data["shape"])
        return spaces.Box(_array_from_json(data["low"], shape, dtype), _array_from_json(data["high"], shape, dtype),
                          shape, dtype)
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data["start"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(data["nvec"], dtype=np.dtype(data["dtype"]), start=data["start"])
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Text":
        return spaces.Text(data["max_length"], min_length=data["min_length"], charset=data["charset"])
    if kind == "Tuple":
        return spaces.Tuple([space_from_json(sub) for sub in data["spaces"]])
    if kind == "Dict":
        return spaces.Dict([(key, space_from_json(sub)) for key, sub in data["spaces"]])  # pairs keep the order
    raise SpaceError(f"unknown space type {kind!r} in a saved space")


@singledispatch
def placeholder_observation(space: spaces.Space) -> Any:
    """A fixed observation inside ``space`` for an agent that has none yet: zeros clipped into a
    Box's bounds, a Discrete's first value, all-zero action masks (nothing legal), ...

    Raises:
        SpaceError: a space without one (Box, Discrete, MultiDiscrete, MultiBinary, Text, Tuple
            and Dict spaces have one).
    """
    raise SpaceError(
        f"observation space {space} has no placeholder observation (Box, Discrete, MultiDiscrete, "
        "MultiBinary, Text, Tuple and Dict spaces have one)"
    )


@placeholder_observation.register
def _(space: spaces.Box) -> Any:
    return np.clip(np.zeros(space.shape), space.low, space.high).astype(space.dtype)


@placeholder_observation.register
def _(space: spaces.Discrete) -> Any:
    return space.dtype.type(space.start)


@placeholder_observation.register
def _(space: spaces.MultiDiscrete) -> Any:
    return np.asarray(space.start, dtype=space.dtype).copy()


@placeholder_observation.register
def _(space: spaces.MultiBinary) -> Any:
    return np.zeros(space.shape, dtype=space.dtype)


@placeholder_observation.register
def _(space: spaces.Tuple) -> Any:
    return tuple(placeholder_observation(sub) for sub in space.spaces)


@placeholder_observation.register
def _(space: spaces.Text) -> Any:
    return min(space.character_list) * space.min_length  # min: the charset's order varies with the hash seed


@placeholder_observation.register
def _(space: spaces.Dict) -> Any:
    return {key: placeholder_observation(sub) for key, sub in space.spaces.items()}
