"""The default model's forward pass in numpy, so that env runners of built-in models skip torch.

Importing torch costs a process about 150 MB; an env runner only needs the forward pass of its
policies. For every policy built from the spaces (no ``model={"module": ...}``), a runner
evaluates :class:`~marl_core.ppo.model.ActorCritic` from its state dict with numpy: the same
encoders (MLP inputs, one-hot Discrete and MultiDiscrete, the CNN for uint8 images, Dict and Tuple
members in the space's order), bodies, heads and free log standard deviations, in float32.
Custom torch modules run in :class:`~marl_core.ppo.model.TorchPolicy` instead.

Example:
    >>> import numpy as np
    >>> from gymnasium import spaces
    >>> from marl_core.ppo.config import DEFAULT_MODEL
    >>> policy = NumpyPolicy(spaces.Box(-1, 1, (4,)), spaces.Discrete(3), DEFAULT_MODEL)
    >>> weights = {"pi_body.0.weight": np.zeros((64, 4), np.float32)}
    >>> policy.set_weights(weights)
    Traceback (most recent call last):
    ...
    marl_core.errors.SpaceError: weights do not fit the model of Discrete(3): missing pi_body.0.bias, ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_core.errors import SpaceError
from marl_core.ppo.actions import ActionLayout, ObservationMasks
from marl_core.ppo.batching import is_image

_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.float32(0.0)),
    "silu": lambda x: x / (np.float32(1.0) + np.exp(-x)),
}


def runs_in_numpy(model_config: Mapping[str, Any]) -> bool:
    """Whether a policy with ``model_config`` is the built-in model (and so runs in numpy)."""
    return model_config.get("module") is None


class NumpyPolicy:
    """Inference of the built-in actor-critic from its state dict (see the module docstring).

    The interface of :class:`~marl_core.ppo.model.TorchPolicy` that env runners use:
    ``observation_space``, ``layout``, ``act``, ``value`` and ``set_weights``.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 model_config: Mapping[str, Any], *, normalize_actions: bool = False) -> None:
        if not runs_in_numpy(model_config):
            raise SpaceError("a custom torch module runs in TorchPolicy, not NumpyPolicy")
        self.observation_space = observation_space
        self.layout = ActionLayout(action_space, normalize_actions)
        self.masks = ObservationMasks(observation_space, self.layout)
        self._inner = self.masks.inner_space
        self._activation = _ACTIVATIONS[model_config["activation"]]
        self._layers = len(model_config["hiddens"])
        self._strides = [int(stride) for _, _, stride in model_config["conv_filters"]]
        self._shared_body = bool(model_config["vf_share_layers"])
        self._gauss = [leaf.kind == "gauss" for leaf in self.layout.leaves]
        self._free_log_std = bool(model_config["free_log_std"])
        self._w: dict[str, np.ndarray] = {}
        self._expected: set[str] | None = None

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Use the parameters of :meth:`TorchPolicy.get_weights` (numpy arrays are not copied)."""
        arrays = {key: np.asarray(value, dtype=np.float32) for key, value in weights.items()}
        if self._expected is None:
            self._expected = self._keys()
        missing = sorted(self._expected - arrays.keys())
        if missing:
            raise SpaceError(f"weights do not fit the model of {self.layout.space}: missing {', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''}")
        self._w = arrays

    def act(self, obs: Any, explore: bool = True, rng: np.random.Generator | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions (flat rows), log-probs and values for a stacked numpy observation batch."""
        inner, mask = self.masks.split(self.masks.canonical(obs))
        inputs, values = self._forward(inner)
        rows, logp = self.layout.sample(inputs, mask, explore, rng)
        return rows, logp, values

    def value(self, obs: Any) -> np.ndarray:
        """State values of a stacked numpy observation batch."""
        return self._forward(self.masks.split(self.masks.canonical(obs))[0])[1]

    # The forward pass, mirroring ActorCritic ----------------------------------------------------

    def _forward(self, obs: Any) -> tuple[np.ndarray, np.ndarray]:
        if not self._w:
            raise SpaceError("NumpyPolicy has no weights yet; call set_weights() first")
        features = self._encode(self._inner, obs, "encoder.")
        hidden = self._body("pi_body", features)
        head = self._linear("pi_head", hidden)
        values = self._linear("vf_head", hidden if self._shared_body else self._body("vf_body", features))[:, 0]
        if not any(self._gauss):
            return head, values
        num_means = self.layout.num_means
        means = head[:, :num_means]
        log_std = (np.broadcast_to(self._w["log_std"], (len(head), len(self._w["log_std"])))
                   if self._free_log_std else head[:, num_means:])
        parts, offset, std_offset = [], 0, 0
        for leaf, gauss in zip(self.layout.leaves, self._gauss, strict=True):
            parts.append(means[:, offset : offset + leaf.size])
            offset += leaf.size
            if gauss:
                parts.append(log_std[:, std_offset : std_offset + leaf.size])
                std_offset += leaf.size
        return np.concatenate(parts, axis=1), values

    def _linear(self, name: str, x: np.ndarray) -> np.ndarray:
        return x @ self._w[f"{name}.weight"].T + self._w[f"{name}.bias"]

    def _body(self, name: str, x: np.ndarray) -> np.ndarray:
        for layer in range(self._layers):
            x = self._activation(self._linear(f"{name}.{2 * layer}", x))
        return x

    def _encode(self, space: spaces.Space, obs: Any, prefix: str) -> np.ndarray:
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            members = [obs[key] for key in space.spaces] if isinstance(space, spaces.Dict) else obs
            subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
            return np.concatenate([self._encode(sub, member, f"{prefix}children_.{i}.")
                                   for i, (sub, member) in enumerate(zip(subspaces, members, strict=True))], axis=1)
        if is_image(space):
            return self._cnn(np.asarray(obs, dtype=np.float32) / np.float32(255.0), prefix)
        obs = np.asarray(obs)
        if isinstance(space, spaces.Discrete):
            return _one_hot(obs.reshape(-1) - int(space.start), int(space.n))
        if isinstance(space, spaces.MultiDiscrete):
            flat = (obs - space.start).reshape(len(obs), -1)
            return np.concatenate([_one_hot(flat[:, i], int(n)) for i, n in enumerate(space.nvec.flat)], axis=1)
        return obs.reshape(len(obs), -1).astype(np.float32)

    def _cnn(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """Valid convolutions with ReLU on NHWC batches, then torch's NCHW flatten, linear, ReLU."""
        for index, stride in enumerate(self._strides):
            weight, bias = self._w[f"{prefix}cnn.0.{2 * index}.weight"], self._w[f"{prefix}cnn.0.{2 * index}.bias"]
            out_channels, _, kernel_h, kernel_w = weight.shape
            windows = np.lib.stride_tricks.sliding_window_view(x, (kernel_h, kernel_w), axis=(1, 2))
            windows = windows[:, ::stride, ::stride]  # (N, OH, OW, C, KH, KW), like the weight's (C, KH, KW)
            n, height, width = windows.shape[:3]
            out = windows.reshape(n * height * width, -1) @ weight.reshape(out_channels, -1).T + bias
            x = np.maximum(out, np.float32(0.0)).reshape(n, height, width, out_channels)
        flat = x.transpose(0, 3, 1, 2).reshape(len(x), -1)
        return np.maximum(self._linear(f"{prefix}cnn.1", flat), np.float32(0.0))

    def _keys(self) -> set[str]:
        keys = {f"{name}.{suffix}" for name in ("pi_head", "vf_head") for suffix in ("weight", "bias")}
        bodies = ("pi_body",) if self._shared_body else ("pi_body", "vf_body")
        keys |= {f"{body}.{2 * i}.{suffix}" for body in bodies for i in range(self._layers)
                 for suffix in ("weight", "bias")}
        if any(self._gauss) and self._free_log_std:
            keys.add("log_std")
        return keys | _image_keys(self._inner, "encoder.", len(self._strides))


def _image_keys(space: spaces.Space, prefix: str, convs: int) -> set[str]:
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return {key for i, sub in enumerate(subspaces) for key in _image_keys(sub, f"{prefix}children_.{i}.", convs)}
    if not is_image(space):
        return set()
    names = [f"{prefix}cnn.0.{2 * i}" for i in range(convs)] + [f"{prefix}cnn.1"]
    return {f"{name}.{suffix}" for name in names for suffix in ("weight", "bias")}


def _one_hot(values: np.ndarray, size: int) -> np.ndarray:
    index = values.astype(np.int64)
    if (index.view(np.uint64) >= size).any():  # negatives too: numpy would count them from the end
        raise IndexError(f"one-hot of {values.tolist()} over {size} values")
    out = np.zeros((len(values), size), np.float32)
    out[np.arange(len(values)), index] = 1.0
    return out
