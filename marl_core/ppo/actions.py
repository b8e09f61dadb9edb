"""Action spaces as flat rows, and sampling from a model's outputs, in numpy (no torch).

Inside the trainer every action is one row of float32 columns: one per Discrete, one per
MultiDiscrete dimension, MultiBinary bit and Box entry; a Tuple (grouped agents) concatenates its
members, a Dict its members in the space's key order. A model's ``dist_inputs`` hold, per leaf,
the logits of a categorical (Discrete, each MultiDiscrete dimension, each MultiBinary bit, each
entry of a bounded integer Box) or the means then the log standard deviations of a Gaussian
(float Box).

Sampling lives here, once, for every policy: env runners run it on the outputs of the numpy
forward pass (:mod:`marl_core.ppo.numpy_policy`) or of a torch module, and the learner's
log-probabilities (:class:`marl_core.ppo.model.ActionDist`) follow the same layout.

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> layout = ActionLayout(spaces.Discrete(3))
    >>> logits = np.array([[0.0, 9.0, 0.0]], np.float32)
    >>> mask = np.array([[1, 0, 1]], np.int8)            # action 1 is illegal
    >>> rows, logp = layout.sample(logits, mask, explore=False)
    >>> rows.tolist(), layout.to_env(rows)
    ([[0.0]], [np.int64(0)])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.errors import EnvContractError, SpaceError, short_repr
from marl_core.spaces import MASK_KEY, OBS_KEY, action_mask_size, is_masked

MASKED_LOGIT = -1e9
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@dataclass(frozen=True)
class Leaf:
    """One factor of an action distribution."""

    kind: str  # "cat" or "gauss"
    size: int  # categories, or Gaussian dimensions
    space: spaces.Space


def leaves(space: spaces.Space) -> list[Leaf]:
    """The factors of ``space``'s distribution, in row order.

    Raises:
        SpaceError: no distribution fits ``space`` (an integer Box unbounded somewhere, with
            more than :data:`MAX_CATEGORIES` values in an entry or :data:`MAX_INTEGER_BOX_LOGITS`
            in all, is refused with what to use instead), or it (or a part of it) holds no action
            to choose: an empty Tuple, Dict, MultiDiscrete, MultiBinary or Box.
    """
    if isinstance(space, (spaces.Tuple, spaces.Dict)):
        if not space.spaces:
            raise SpaceError(f"{space} holds no action to choose (it is empty); give every acting agent at least one")
        members = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return [leaf for sub in members for leaf in leaves(sub)]
    if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)) and not int(np.prod(space.shape)):
        raise SpaceError(f"{space} holds no action to choose (it is empty); give every acting agent at least one")
    if isinstance(space, spaces.Discrete):
        return [Leaf("cat", int(space.n), space)]
    if isinstance(space, spaces.MultiDiscrete):
        return [Leaf("cat", int(n), space) for n in space.nvec.flat]
    if isinstance(space, spaces.MultiBinary):
        return [Leaf("cat", 2, space)] * int(np.prod(space.shape))
    if isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return [Leaf("gauss", int(np.prod(space.shape)), space)]
    if isinstance(space, spaces.Box) and space.dtype.kind in "iub":
        return [Leaf("cat", int(n), space) for n in _integer_box_sizes(space).flat]
    raise SpaceError(f"no action distribution for {short_repr(space, 120)}; supported: Discrete, MultiDiscrete, "
                     "MultiBinary, Box (float, or integer with bounds), and Tuple and Dict of these")


MAX_CATEGORIES = 65536
"""The most values one entry of an integer Box action may take: each is one logit of the model."""

MAX_INTEGER_BOX_LOGITS = 1 << 20
"""The most values the entries of one integer Box action may take in all."""


def _integer_box_sizes(space: spaces.Box) -> np.ndarray:
    """How many values each entry of an integer (or bool) Box takes, as int64."""
    if not (np.all(space.bounded_below) and np.all(space.bounded_above)):
        raise SpaceError(f"no action distribution for {short_repr(space, 120)}: an integer Box action needs finite "
                         "bounds in every entry (each entry is a categorical over its values); give it bounds, or "
                         "use a float Box or a MultiDiscrete")
    # In Python ints: high - low + 1 overflows int64 (and uint64) for the widest bounds.
    sizes = [int(high) - int(low) + 1 for low, high in zip(space.low.flat, space.high.flat, strict=True)]
    if max(sizes) > MAX_CATEGORIES:
        raise SpaceError(f"no action distribution for {short_repr(space, 120)}: an entry takes {max(sizes)} "
                         f"values, more than the {MAX_CATEGORIES} one categorical may have; use a float Box instead")
    if sum(sizes) > MAX_INTEGER_BOX_LOGITS:
        raise SpaceError(f"no action distribution for {short_repr(space, 120)}: its entries take {sum(sizes)} values "
                         f"in all (one logit each), more than {MAX_INTEGER_BOX_LOGITS}; use a float Box instead")
    return np.array(sizes, np.int64)


def _lowest_values(space: spaces.Space) -> np.ndarray | None:
    """The lowest value of each entry of a space whose entries are each one categorical
    (MultiDiscrete, MultiBinary, an integer Box), whose rows hold the offsets from it; None for
    any other space."""
    if isinstance(space, spaces.MultiDiscrete):
        return np.asarray(space.start)
    if isinstance(space, spaces.MultiBinary):
        return np.zeros(space.shape, np.int64)
    if isinstance(space, spaces.Box) and space.dtype.kind in "iub":
        return space.low
    return None


def _offset_dtype(space: spaces.Space) -> type:
    """The integer type in which a space's values and their offsets from its lowest never overflow."""
    return np.uint64 if space.dtype == np.uint64 else np.int64


class ActionLayout:
    """How one action space maps to flat rows and dist inputs; numpy sampling.

    Args:
        space: the action space.
        normalize_actions: rows hold a float Box bounded in every entry in [-1, 1], mapped
            linearly onto its bounds in :meth:`to_env` (RLlib's ``normalize_actions``).

    Attributes:
        leaves: the distribution's factors in row order.
        num_inputs: width of ``dist_inputs`` (logits, Gaussian means and log standard deviations).
        num_columns: width of an action row.
        mask_size: width of the action mask the space admits (None: no mask possible).
    """

    def __init__(self, space: spaces.Space, normalize_actions: bool = False) -> None:
        self.space = space
        self.normalize_actions = normalize_actions
        self._mapped = self._normalized_boxes()
        self.leaves = leaves(space)
        self.num_inputs = sum(leaf.size * (2 if leaf.kind == "gauss" else 1) for leaf in self.leaves)
        self.num_columns = sum(1 if leaf.kind == "cat" else leaf.size for leaf in self.leaves)
        self.num_means = self.num_inputs - sum(leaf.size for leaf in self.leaves if leaf.kind == "gauss")
        self.mask_size = action_mask_size(space)
        self.is_discrete = isinstance(space, spaces.Discrete)

    def _normalized_boxes(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """id of each Box the rows hold in [-1, 1] -> (middle, half width): computed once, read per row."""
        return {id(box): _middle_and_half_width(box) for box in _boxes(self.space)
                if self.normalize_actions and normalized_box(box)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A pickled or deep-copied layout holds new Box objects: the mapping is keyed anew.
        self.__dict__.update(state)
        self._mapped = self._normalized_boxes()

    def check_mask(self, mask_space: spaces.Space) -> None:
        """Raise :class:`SpaceError` unless an ``action_mask`` of ``mask_space`` fits this space."""
        if self.mask_size is None:
            raise SpaceError(f"an action_mask needs a Discrete or MultiDiscrete action space, not {self.space}")
        if isinstance(mask_space, spaces.Tuple):  # gymnasium's per-dimension form of a MultiDiscrete mask
            raise SpaceError(f"an action_mask space {short_repr(mask_space, 120)} does not fit {self.space}: the "
                             f"trainer takes a flat mask of shape ({self.mask_size},), the dimensions' masks one "
                             "after another")
        if mask_space.shape != (self.mask_size,):
            raise SpaceError(f"action_mask of shape {mask_space.shape} does not fit {self.space} "
                             f"(expected ({self.mask_size},))")

    def sample(self, inputs: np.ndarray, mask: np.ndarray | None, explore: bool = True,
               rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Actions (flat float32 rows; the mode when not exploring) and their log-probabilities.

        Categoricals draw with the Gumbel-max trick, so a masked action (logit
        :data:`MASKED_LOGIT`) is never drawn; Gaussians draw ``mean + std * N(0, 1)``.
        """
        inputs = np.asarray(inputs, dtype=np.float32)
        batch = inputs.shape[0]
        if explore and rng is None:
            rng = np.random.default_rng()
        columns, logp = [], np.zeros(batch, np.float32)
        offset = mask_offset = 0
        for leaf in self.leaves:
            if leaf.kind == "cat":
                logits = inputs[:, offset : offset + leaf.size]
                offset += leaf.size
                legal = None
                if mask is not None:
                    legal = np.asarray(mask[:, mask_offset : mask_offset + leaf.size]) > 0
                    mask_offset += leaf.size
                    if not legal.any(axis=1).all():  # else a masked action would be drawn
                        rows = np.flatnonzero(~legal.any(axis=1)).tolist()
                        error = EnvContractError(f"the action mask of batch rows {rows} allows no action")
                        error.rows = rows  # type: ignore[attr-defined]  (the sampler names their agents)
                        raise error
                    logits = np.where(legal, logits, np.float32(MASKED_LOGIT))
                log_probs = _log_softmax(logits)
                score = log_probs - np.log(-np.log(rng.random(log_probs.shape))) if explore else log_probs
                if legal is not None:  # legal logits that are NaN, -inf or below MASKED_LOGIT stay legal choices
                    lowest = np.finfo(score.dtype).min
                    score = np.where(legal, np.nan_to_num(score, nan=lowest, neginf=lowest), -np.inf)
                choice = np.argmax(score, axis=1)
                logp += log_probs[np.arange(batch), choice]
                columns.append(choice[:, None].astype(np.float32))
            else:
                mean = inputs[:, offset : offset + leaf.size]
                log_std = inputs[:, offset + leaf.size : offset + 2 * leaf.size]
                offset += 2 * leaf.size
                value = mean + rng.standard_normal(mean.shape, np.float32) * np.exp(log_std) if explore else mean
                logp += gauss_logp(value, mean, log_std)
                columns.append(value.astype(np.float32))
        return np.concatenate(columns, axis=1), logp

    def to_env(self, rows: np.ndarray) -> list[Any]:
        """Flat action rows -> actions in the env's format (Box actions mapped onto their bounds
        with ``normalize_actions``, and clipped to them)."""
        if self.is_discrete:
            return list((rows[:, 0].astype(np.int64) + np.int64(self.space.start)).astype(self.space.dtype, copy=False))
        return [_unflatten(self.space, row, [0], self._mapped)[0] for row in rows]

    def from_env(self, action: Any) -> np.ndarray:
        """One env action -> its flat row (the inverse of :meth:`to_env` inside the bounds)."""
        return np.asarray(_flatten(self.space, action, self._mapped), dtype=np.float32)


def name_stuck_rows(error: EnvContractError, names: Sequence[Any], what: str, policy_id: str) -> EnvContractError | None:
    """For the error of :meth:`ActionLayout.sample` about rows whose mask allows no action, the
    same with the rows named (``names[row]``, described as ``what``); None for any other error."""
    if not hasattr(error, "rows"):
        return None
    named = [names[row] for row in error.rows]
    return EnvContractError(f"{what} {named} of policy {policy_id!r} must act, but the action mask of each allows "
                            "no action")


def gauss_logp(value: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """Log-density of a diagonal Gaussian, summed over the last axis."""
    return (-0.5 * ((value - mean) / np.exp(log_std)) ** 2 - log_std - _LOG_SQRT_2PI).sum(-1)


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def normalized_box(space: spaces.Space) -> bool:
    """Whether ``normalize_actions`` maps ``space``: a float Box bounded in every entry (RLlib's rule)."""
    return (isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating)
            and bool(np.all(space.bounded_below) and np.all(space.bounded_above)))


def _middle_and_half_width(space: spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """The middle of a bounded Box and half its width, in float64, halved before they are added
    or subtracted: ``high - low`` overflows for float64's widest bounds."""
    low, high = space.low.astype(np.float64) / 2, space.high.astype(np.float64) / 2
    return low + high, high - low


def _boxes(space: spaces.Space) -> list[spaces.Box]:
    """The Box spaces in ``space`` (itself, or inside its Tuples and Dicts)."""
    if isinstance(space, spaces.Tuple):
        return [box for sub in space.spaces for box in _boxes(sub)]
    if isinstance(space, spaces.Dict):
        return [box for sub in space.spaces.values() for box in _boxes(sub)]
    return [space] if isinstance(space, spaces.Box) else []


def _unflatten(space: spaces.Space, row: np.ndarray, at: list[int], mapped: dict[int, Any]) -> tuple[Any]:
    start = at[0]
    if isinstance(space, spaces.Discrete):
        at[0] += 1
        return (space.dtype.type(int(row[start]) + int(space.start)),)  # in the space's dtype, as the env checks
    if (lowest := _lowest_values(space)) is not None:  # a categorical per entry: rows hold offsets
        at[0] += int(np.prod(space.shape))
        work = _offset_dtype(space)
        values = row[start : at[0]].astype(work).reshape(space.shape) + lowest.astype(work)
        return (np.asarray(values, dtype=space.dtype),)  # a 0-d array for shape (): the sum gives a scalar
    if isinstance(space, spaces.Box):
        at[0] += int(np.prod(space.shape))
        value = row[start : at[0]].reshape(space.shape)
        if (mapping := mapped.get(id(space))) is not None:
            middle, half_width = mapping
            value = middle + np.clip(value, -1.0, 1.0) * half_width  # clipped first: beyond ±1 it may overflow
        value = np.clip(value, space.low, space.high)
        return (np.asarray(value, dtype=space.dtype),)  # 0-d arrays for shape (): np.clip gives a scalar
    if isinstance(space, spaces.Dict):  # members in the space's key order, as the rows hold them
        return ({key: _unflatten(sub, row, at, mapped)[0] for key, sub in space.spaces.items()},)
    return (tuple(_unflatten(sub, row, at, mapped)[0] for sub in space.spaces),)


def _flatten(space: spaces.Space, action: Any, mapped: dict[int, Any]) -> list[float]:
    if isinstance(space, spaces.Discrete):
        return [int(action) - int(space.start)]
    if (lowest := _lowest_values(space)) is not None:
        work = _offset_dtype(space)
        return list((np.asarray(action).astype(work) - lowest.astype(work)).reshape(-1))
    if isinstance(space, spaces.Box):
        value = np.asarray(action, dtype=np.float64).reshape(-1)
        if (mapping := mapped.get(id(space))) is not None:
            middle, half_width = (part.reshape(-1) for part in mapping)
            value = np.where(half_width > 0, (value - middle) / np.where(half_width > 0, half_width, 1.0), 0.0)
        return list(value.astype(np.float32))
    if isinstance(space, spaces.Dict):
        return [x for key, sub in space.spaces.items() for x in _flatten(sub, action[key], mapped)]
    return [x for sub, a in zip(space.spaces, action, strict=True) for x in _flatten(sub, a, mapped)]


class ObservationMasks:
    """Where the action masks sit in one policy's observations, and what its model sees.

    - A canonical masked observation (a Dict of ``"observation"`` and ``"action_mask"``,
      DESIGN.md): the mask governs the whole action; the model sees ``"observation"``.
    - A grouped agent's Tuple of member observations, for a Tuple action space with one slot
      per member, where some members' observations are canonical masked Dicts (or, for a
      group of groups, hold some): each such member's mask governs its slot. :meth:`canonical`
      turns a batch of these into the canonical form: the model sees the Tuple of the members'
      ``"observation"`` parts (the whole observation of a member without a mask), and the mask
      is the members' masks, in slot order. A slot without a mask allows every action, and so
      does a slot whose mask allows nothing in a row: its member does not act now, and the
      group ignores that slot.
    - Anything else carries no mask.

    Attributes:
        masked: whether batches in canonical form carry an ``"action_mask"``.
        grouped: whether those masks come from a group's slots (:meth:`canonical` gathers them).
        slot_mask_size: how many entries those slots' masks have in all (0 unless grouped).
        inner_space: the observation space the model sees.
    """

    def __init__(self, observation_space: spaces.Space, layout: ActionLayout) -> None:
        self.masked = is_masked(observation_space)
        self.grouped = False
        self.slot_mask_size = 0
        self._plan: _Plan | None = None
        if self.masked:
            _check_canonical(observation_space, layout, "")
            self.inner_space: spaces.Space = observation_space[OBS_KEY]
            return
        plan = _plan(observation_space, layout.space, "")
        self.inner_space = observation_space
        if isinstance(plan, list):  # a group with masks in its slots
            self._plan = plan
            self.masked = self.grouped = True
            self.inner_space = _inner_space(plan, observation_space)
            self.slot_mask_size = _mask_size(plan, observation_space)

    def canonical(self, obs: Any) -> Any:
        """A stacked numpy observation batch in canonical form (unchanged unless grouped)."""
        if self._plan is None:
            return obs
        masks: list[np.ndarray | int] = []
        inner = _canonical(self._plan, obs, masks)
        rows = next(len(mask) for mask in masks if not isinstance(mask, int))  # a group's plan holds a mask
        return {OBS_KEY: inner, MASK_KEY: np.concatenate(
            [np.ones((rows, mask), np.int8) if isinstance(mask, int) else mask for mask in masks], axis=1)}

    def split(self, obs: Any) -> tuple[Any, Any]:
        """(the model's part, the mask or None) of a batch in canonical form (numpy or torch)."""
        if self.masked:
            return obs[OBS_KEY], obs[MASK_KEY]
        return obs, None


# How to read a slot: _MASKED (a canonical masked Dict), an int (no mask: that many categorical
# columns allow everything), or a list of slot plans (a group with masks in its slots).
_MASKED = "masked"
_Plan = str | int | list


def _plan(observation_space: spaces.Space, action_space: spaces.Space, where: str) -> _Plan:
    if is_masked(observation_space):
        _check_canonical(observation_space, ActionLayout(action_space), where)
        return _MASKED
    if (isinstance(observation_space, spaces.Tuple) and isinstance(action_space, spaces.Tuple)
            and len(observation_space.spaces) == len(action_space.spaces)):
        slots = [_plan(sub, sub_action, f"{where}[{i}]") for i, (sub, sub_action)
                 in enumerate(zip(observation_space.spaces, action_space.spaces, strict=True))]
        if any(slot is _MASKED or isinstance(slot, list) for slot in slots):
            return slots
    return sum(leaf.size for leaf in leaves(action_space) if leaf.kind == "cat")


def _check_canonical(space: spaces.Dict, layout: ActionLayout, where: str) -> None:
    """Raise unless ``space`` is the canonical masked Dict with a mask that fits ``layout``."""
    at = f"slot {where} of the grouped agent's Tuple observation: " if where else ""
    if set(space.spaces) != {OBS_KEY, MASK_KEY}:
        raise SpaceError(
            f"{at}an observation space with an {MASK_KEY!r} must be the canonical Dict of {OBS_KEY!r} and "
            f"{MASK_KEY!r} (DESIGN.md), received one with keys {sorted(space.spaces)}; put the "
            f"other keys in a Dict under {OBS_KEY!r}"
        )
    try:
        layout.check_mask(space[MASK_KEY])
    except SpaceError as error:
        raise SpaceError(f"{at}{error}") from None


def _inner_space(plan: _Plan, space: spaces.Space) -> spaces.Space:
    if plan is _MASKED:
        return space[OBS_KEY]
    if isinstance(plan, list):
        return spaces.Tuple([_inner_space(sub, item) for sub, item in zip(plan, space.spaces, strict=True)])
    return space


def _mask_size(plan: _Plan, space: spaces.Space) -> int:
    if plan is _MASKED:
        return int(np.prod(space[MASK_KEY].shape))
    if isinstance(plan, list):
        return sum(_mask_size(sub, item) for sub, item in zip(plan, space.spaces, strict=True))
    return 0


def _canonical(plan: _Plan, obs: Any, masks: list[np.ndarray | int]) -> Any:
    """The model's part of ``obs``; appends the slot's mask columns to ``masks`` (for a slot
    without a mask, how many columns allow everything)."""
    if plan is _MASKED:
        mask = np.asarray(obs[MASK_KEY])
        masks.append(np.where(mask.any(axis=1, keepdims=True), mask, np.ones_like(mask)))
        return obs[OBS_KEY]
    if isinstance(plan, list):
        return tuple(_canonical(sub, item, masks) for sub, item in zip(plan, obs, strict=True))
    masks.append(plan)
    return obs
