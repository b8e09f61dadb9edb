"""Models and action distributions chosen from the spaces.

Observations: vectors (Box, Discrete, MultiDiscrete, MultiBinary) go through an MLP; uint8 images of
shape (H, W, C) through a CNN; Dict and Tuple observations encode every member and concatenate.
A Dict observation with ``"action_mask"`` is encoded from its ``"observation"`` member and the
mask sets masked logits to a large negative number, so a masked action is never sampled; a
grouped agent's Tuple of member observations with masks in its slots reads as that form too
(:class:`marl_core.ppo.actions.ObservationMasks`).

Actions: Discrete, MultiDiscrete (one categorical per dimension), MultiBinary (one per bit), an
integer Box bounded in every entry (one categorical per entry, over its values), float Box (a
Gaussian with a free, state-independent log standard deviation; with the config's
``normalize_actions``, RLlib's default, it acts in [-1, 1] mapped onto a Box bounded in every
entry; actions sent to the env are clipped to the bounds), Tuple (a product of its members, as for
grouped agents) and Dict (a product of its members, in the space's key order). Inside the
trainer every action is one row of float32 columns (:mod:`marl_core.ppo.actions`), where sampling
happens in numpy; env runners evaluate this module's default model with
:mod:`marl_core.ppo.numpy_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from marl_core.errors import SpaceError, short_repr
from marl_core.ppo.actions import MASKED_LOGIT, ActionLayout, ObservationMasks
from marl_core.ppo.batching import is_image

# Observations -------------------------------------------------------------------------------


def to_tensor(batch: Any, device: torch.device | str = "cpu") -> Any:
    """Nested numpy batch -> nested torch tensors (no copy on CPU when possible)."""
    if isinstance(batch, dict):
        return {key: to_tensor(value, device) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(to_tensor(value, device) for value in batch)
    if isinstance(batch, np.ndarray) and not batch.flags.writeable:  # e.g. read from Ray's object store
        return torch.tensor(batch, device=device)
    return torch.as_tensor(batch, device=device)


class Encoder(nn.Module):
    """Turns one (possibly nested) observation batch into flat float features."""

    def __init__(self, space: spaces.Space, model_config: dict[str, Any]) -> None:
        super().__init__()
        self.space = space
        self.children_: nn.ModuleList | None = None
        self.cnn: nn.Sequential | None = None
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            members = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
            self.children_ = nn.ModuleList(Encoder(sub, model_config) for sub in members)
            self.out_size = sum(child.out_size for child in self.children_)
        elif is_image(space):
            _check_convs_fit(space, model_config["conv_filters"])
            height, width, channels = space.shape
            layers: list[nn.Module] = []
            for out_channels, kernel, stride in model_config["conv_filters"]:
                layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.ReLU()]
                channels = out_channels
            layers.append(nn.Flatten())
            convs = nn.Sequential(*layers)
            with torch.no_grad():
                flat = convs(torch.zeros(1, space.shape[2], height, width)).shape[1]
            self.cnn = nn.Sequential(convs, nn.Linear(flat, model_config["conv_hidden"]), nn.ReLU())
            self.out_size = model_config["conv_hidden"]
        elif isinstance(space, spaces.Discrete):
            self.out_size = int(space.n)
        elif isinstance(space, spaces.MultiDiscrete):
            self.out_size = int(np.sum(space.nvec))
        elif isinstance(space, (spaces.Box, spaces.MultiBinary)):
            self.out_size = int(np.prod(space.shape))
        else:
            raise SpaceError(f"no encoder for observation space {short_repr(space, 120)}; use Box, Discrete, MultiDiscrete, "
                             "MultiBinary, Dict or Tuple, or pass PolicySpec(model={'module': factory})")

    def forward(self, obs: Any) -> torch.Tensor:
        space = self.space
        if self.children_ is not None:
            # By key, in the space's order: an env may build its dicts in another key order.
            members = [obs[key] for key in space.spaces] if isinstance(space, spaces.Dict) else obs
            return torch.cat([child(o) for child, o in zip(self.children_, members, strict=True)], dim=-1)
        if self.cnn is not None:
            return self.cnn(obs.permute(0, 3, 1, 2).float() / 255.0)
        if isinstance(space, spaces.Discrete):
            return nn.functional.one_hot((obs - space.start).long(), int(space.n)).float()
        if isinstance(space, spaces.MultiDiscrete):
            flat = (obs - torch.as_tensor(space.start)).long().reshape(obs.shape[0], -1)
            return torch.cat([nn.functional.one_hot(flat[:, i], int(n)).float()
                              for i, n in enumerate(space.nvec.flat)], dim=-1)
        return obs.reshape(obs.shape[0], -1).float()


# Actions ------------------------------------------------------------------------------------


class ActionDist:
    """Log-probabilities and entropies of flat action rows under torch ``dist_inputs`` (the learner).

    Sampling happens in numpy, in :meth:`marl_core.ppo.actions.ActionLayout.sample`, on the same layout.
    """

    def __init__(self, space: spaces.Space, normalize_actions: bool = False) -> None:
        self.layout = ActionLayout(space, normalize_actions)

    def logp_entropy(
        self, inputs: torch.Tensor, mask: torch.Tensor | None, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` and the entropies, both of shape (B,)."""
        logps, entropies = [], []
        offset = mask_offset = column = 0
        for leaf in self.layout.leaves:
            if leaf.kind == "cat":
                logits = inputs[:, offset : offset + leaf.size]
                offset += leaf.size
                if mask is not None:
                    legal = mask[:, mask_offset : mask_offset + leaf.size] > 0
                    logits = torch.where(legal, logits, torch.full_like(logits, MASKED_LOGIT))
                    mask_offset += leaf.size
                # Shifted first, like the samplers' numpy log-softmax: the same numbers on both sides.
                shifted = logits - logits.detach().max(dim=-1, keepdim=True).values
                log_probs = shifted - torch.logsumexp(shifted, dim=-1, keepdim=True)
                choice = actions[:, column].long()
                column += 1
                logps.append(log_probs.gather(-1, choice[:, None]).squeeze(-1))
                entropies.append(-(log_probs.exp() * log_probs).sum(-1))
            else:
                mean = inputs[:, offset : offset + leaf.size]
                log_std = inputs[:, offset + leaf.size : offset + 2 * leaf.size]
                offset += 2 * leaf.size
                value = actions[:, column : column + leaf.size]
                column += leaf.size
                logps.append((-0.5 * ((value - mean) / log_std.exp()) ** 2 - log_std
                              - 0.5 * math.log(2 * math.pi)).sum(-1))
                entropies.append((log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1))
        return torch.stack(logps, -1).sum(-1), torch.stack(entropies, -1).sum(-1)


# The module ---------------------------------------------------------------------------------


_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "silu": nn.SiLU}  # the names config.ACTIVATIONS lists


def _check_convs_fit(space: spaces.Box, filters: Sequence[Sequence[int]]) -> None:
    """Raise unless the ``conv_filters`` fit the image ``space`` (read as height, width, channels)."""
    height, width, channels = space.shape
    size = [height, width]
    for layer, (_, kernel, stride) in enumerate(filters):
        if min(size) < kernel:
            looks_chw = channels > 4 and height <= 4
            raise SpaceError(
                f"the image observation {space} is read as (height, width, channels) = {space.shape}, and "
                f"conv_filters {[list(f) for f in filters]} do not fit it: layer {layer}'s kernel is {kernel}x{kernel} "
                f"and its input {size[0]}x{size[1]}. Pass model={{'conv_filters': [...]}} for "
                f"{height}x{width} images" + (" (channels come last: this one looks channels-first; transpose it)"
                                              if looks_chw else ", or observe a float Box to use the MLP"))
        size = [(n - kernel) // stride + 1 for n in size]


def _mlp(in_size: int, hiddens: Sequence[int], activation: str) -> tuple[nn.Sequential, int]:
    act = _ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    for size in hiddens:
        layers += [_init(nn.Linear(in_size, size), math.sqrt(2)), act()]
        in_size = size
    return nn.Sequential(*layers), in_size


def _init(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class ActorCritic(nn.Module):
    """The default model: encoder, then actor and critic MLPs (shared with ``vf_share_layers``).

    ``forward(obs) -> (dist_inputs, values)`` where ``obs`` is the observation batch without its
    action mask; Gaussian leaves get their log standard deviations appended to their means: free
    parameters with ``free_log_std`` (the default), else outputs of the actor like the means.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, model_config: dict[str, Any]) -> None:
        super().__init__()
        self.layout = ActionLayout(action_space)
        self.encoder = Encoder(observation_space, model_config)
        hiddens, activation = model_config["hiddens"], model_config["activation"]
        self.pi_body, size = _mlp(self.encoder.out_size, hiddens, activation)
        self.vf_body = None if model_config["vf_share_layers"] else _mlp(self.encoder.out_size, hiddens, activation)[0]
        self.num_means = self.layout.num_means
        gauss = sum(leaf.size for leaf in self.layout.leaves if leaf.kind == "gauss")
        free = bool(model_config["free_log_std"])
        self.pi_head = _init(nn.Linear(size, self.num_means + (0 if free else gauss)), 0.01)
        self.vf_head = _init(nn.Linear(size, 1), 1.0)
        self.log_std = nn.Parameter(torch.zeros(gauss)) if gauss and free else None
        self.gauss = gauss

    def forward(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.encoder(obs)
        hidden = self.pi_body(features)
        out = self.pi_head(hidden)
        values = self.vf_head(hidden if self.vf_body is None else self.vf_body(features)).squeeze(-1)
        if self.gauss:
            means = out[:, : self.num_means]
            log_std = self.log_std.expand(out.shape[0], self.gauss) if self.log_std is not None else out[:, self.num_means :]
            out = _interleave_log_std(means, log_std, self.layout)
        return out, values


def _interleave_log_std(means: torch.Tensor, log_std: torch.Tensor, layout: ActionLayout) -> torch.Tensor:
    """The distribution inputs: each leaf's means, and after a Gaussian leaf's its ``log_std`` columns."""
    parts, offset, std_offset = [], 0, 0
    for leaf in layout.leaves:
        parts.append(means[:, offset : offset + leaf.size])
        offset += leaf.size
        if leaf.kind == "gauss":
            parts.append(log_std[:, std_offset : std_offset + leaf.size])
            std_offset += leaf.size
    return torch.cat(parts, dim=-1)


ModuleFactory = Callable[[spaces.Space, spaces.Space, dict], nn.Module]


class TorchPolicy:
    """A learned policy: its module, its action distribution and the observation plumbing.

    Used on the learner (on its device) and in env runners (CPU, inference only);
    ``normalize_actions`` as :class:`~marl_core.ppo.actions.ActionLayout` takes it.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 model_config: dict[str, Any], device: str | torch.device = "cpu", *,
                 normalize_actions: bool = False) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.dist = ActionDist(action_space, normalize_actions)
        self.layout = self.dist.layout
        self.masks = ObservationMasks(observation_space, self.layout)
        factory: ModuleFactory = model_config.get("module") or ActorCritic
        self.device = torch.device(device)
        self.module = factory(self.masks.inner_space, action_space, model_config).to(self.device)

    @property
    def masked(self) -> bool:
        """Whether the policy's observations carry action masks (see :class:`ObservationMasks`)."""
        return self.masks.masked

    def split(self, obs: Any) -> tuple[Any, torch.Tensor | None]:
        """(observation part, mask or None) of a tensor batch in canonical form."""
        return self.masks.split(obs)

    def evaluate(self, obs: Any, actions: torch.Tensor):
        """(log-probs, entropies, values) of ``actions`` under the current parameters.

        ``obs`` is a tensor batch in canonical form (:meth:`ObservationMasks.canonical`).
        """
        inner, mask = self.split(obs)
        inputs, values = self.module(inner)
        logp, entropy = self.dist.logp_entropy(inputs, mask, actions)
        return logp, entropy, values

    @torch.no_grad()
    def act(self, obs_np: Any, explore: bool = True, rng: np.random.Generator | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Actions (flat rows), log-probs and values for a stacked numpy observation batch."""
        obs_np = self.masks.canonical(obs_np)
        inner, _ = self.split(to_tensor(obs_np, self.device))
        inputs, values = self.module(inner)
        _, mask = self.split(obs_np)
        rows, logp = self.layout.sample(inputs.cpu().numpy(), mask, explore, rng)
        return rows, logp, values.cpu().numpy()

    @torch.no_grad()
    def value(self, obs_np: Any) -> np.ndarray:
        """State values of a stacked numpy observation batch."""
        inner, _ = self.split(to_tensor(self.masks.canonical(obs_np), self.device))
        return self.module(inner)[1].cpu().numpy()

    def get_weights(self) -> dict[str, np.ndarray]:
        """The module's parameters and buffers as numpy arrays (copies)."""
        return {key: value.detach().cpu().numpy().copy() for key, value in self.module.state_dict().items()}

    def set_weights(self, weights: dict[str, Any]) -> None:
        """Load parameters produced by :meth:`get_weights` (numpy arrays or tensors)."""
        self.module.load_state_dict({key: torch.tensor(np.asarray(value)) if not isinstance(value, torch.Tensor)
                                     else value for key, value in weights.items()})
