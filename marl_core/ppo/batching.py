"""Observation batches: per-agent observations stacked leaf-wise into numpy arrays (no torch).

A batch mirrors its space: a Dict space gives a dict of arrays, a Tuple space a tuple, any other
space one array with a leading batch axis.

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> space = spaces.Dict({"pos": spaces.Box(-1, 1, (2,)), "mode": spaces.Discrete(3)})
    >>> batch = stack_obs(space, [{"pos": np.zeros(2, np.float32), "mode": 1},
    ...                           {"pos": np.ones(2, np.float32), "mode": 2}])
    >>> batch["pos"].shape, batch["mode"].tolist(), index_obs(batch, 1)["mode"].item()
    ((2, 2), [1, 2], 2)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces


def stack_obs(space: spaces.Space, observations: Sequence[Any]) -> Any:
    """Stack per-agent observations leaf-wise into numpy arrays with a leading batch axis."""
    if isinstance(space, spaces.Dict):
        return {key: stack_obs(sub, [o[key] for o in observations]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(stack_obs(sub, [o[i] for o in observations]) for i, sub in enumerate(space.spaces))
    return np.asarray(observations, dtype=space.dtype if space.dtype is not None else None)


def index_obs(batch: Any, index: Any) -> Any:
    """Rows ``index`` of a stacked observation batch (numpy or torch, nested)."""
    if isinstance(batch, dict):
        return {key: index_obs(value, index) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(index_obs(value, index) for value in batch)
    return batch[index]


def concat_obs(batches: Sequence[Any]) -> Any:
    """Concatenate stacked observation batches along the batch axis."""
    first = batches[0]
    if isinstance(first, dict):
        return {key: concat_obs([b[key] for b in batches]) for key in first}
    if isinstance(first, tuple):
        return tuple(concat_obs([b[i] for b in batches]) for i in range(len(first)))
    return np.concatenate(batches, axis=0)


def as_dtype(space: spaces.Space, batch: Any) -> Any:
    """``batch`` (as :func:`~marl_core.vector.stack` builds it) cast leaf-wise to ``space``'s dtypes."""
    if isinstance(batch, dict):
        return {key: as_dtype(space[key], value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(as_dtype(space[i], value) for i, value in enumerate(batch))
    dtype = getattr(space, "dtype", None)
    if dtype is None or batch.dtype == dtype:
        return batch
    cast = _cast(batch, dtype)
    if cast is None:
        raise ValueError(f"observations of dtype {batch.dtype} do not fit {space}'s dtype {dtype}")
    return cast


def _cast(array: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``array`` as ``dtype``; None when a cast to integers changes a value (300.0 -> 44 in
    uint8, 0.7 -> 0): never silently. Casts to floats keep what a model needs."""
    cast = array.astype(dtype)
    return None if dtype.kind in "iub" and not np.array_equal(cast, array) else cast


def unfit(space: spaces.Space, value: Any) -> bool:
    """Whether a model of ``space`` cannot take the observation ``value``: a structure, shape or
    type that does not match, a Discrete (or MultiDiscrete) value out of range, or a value that a
    cast to an integer dtype would change. A float observation outside a Box's bounds, or of
    another float dtype, fits: the model takes it as it is."""
    if isinstance(space, spaces.Dict):
        return (not isinstance(value, Mapping) or set(value) != set(space.spaces)
                or any(unfit(sub, value[key]) for key, sub in space.spaces.items()))
    if isinstance(space, spaces.Tuple):
        return (not isinstance(value, tuple) or len(value) != len(space.spaces)  # stacking needs tuples
                or any(unfit(sub, item) for sub, item in zip(space.spaces, value, strict=True)))
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return True
    if array.dtype.kind not in "biuf" or array.shape != space.shape:
        return True
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        low = np.asarray(space.start)
        high = low + (space.n if isinstance(space, spaces.Discrete) else space.nvec)
        return bool((array != np.round(array)).any() or (array < low).any() or (array >= high).any())
    dtype = getattr(space, "dtype", None)
    return dtype is not None and array.dtype != dtype and _cast(array, dtype) is None


def unfit_descriptions(rows: Sequence[tuple[str, spaces.Space, Any]]) -> list[str]:
    """``"LABEL: why (space ...)"`` for each ``(label, space, observation)`` whose observation a
    model of ``space`` cannot take (:func:`unfit`)."""
    from marl_core.spaces import why_not_contained

    found = []
    for label, space, observation in rows:
        if unfit(space, observation):
            why = why_not_contained(space, observation) or f"{observation!r} does not fit {space}"
            found.append(f"{label}: {why}" + ("" if str(space) in why else f" (space {space})"))
    return found


def listed(found: Sequence[str]) -> str:
    """The first three of ``found``, and how many more."""
    return "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")


def is_image(space: spaces.Space) -> bool:
    """A uint8 Box of shape (H, W, C): encoded with a CNN."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
