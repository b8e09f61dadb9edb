"""PPOConfig: every knob of the trainer, one documented field each, set with RLlib-style builders.

Example:
    >>> from marl_core.ppo import PPOConfig
    >>> config = (
    ...     PPOConfig()
    ...     .environment("marl_core.envs:RockPaperScissors")
    ...     .env_runners(num_env_runners=0, num_envs_per_env_runner=4)
    ...     .training(lr=1e-3, train_batch_size=200)
    ... )
    >>> config.lr, config.num_envs_per_env_runner
    (0.001, 4)
    >>> config.set("training.gamma", "0.9").gamma
    0.9
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import itertools
import json
import logging
import math
import numbers
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from marl_core.errors import CheckpointError, ConfigError, a_type

if TYPE_CHECKING:
    import gymnasium as gym

    from marl_core.ppo.algorithm import PPO

PolicyID = str
DEFAULT_POLICY = "default_policy"

#: Default model: separate actor and critic MLPs (CNN encoders for uint8 HWC images). Every key:
#: ``hiddens`` (MLP layer sizes), ``activation`` (one of :data:`ACTIVATIONS`), ``conv_filters``
#: (``[channels, kernel, stride]`` per layer) and ``conv_hidden`` (image encoders),
#: ``vf_share_layers`` (one MLP for actor and critic), ``free_log_std`` (Box actions: a learned
#: log standard deviation independent of the observation, else one the actor outputs).
DEFAULT_MODEL: dict[str, Any] = {
    "hiddens": [64, 64],
    "activation": "tanh",
    "conv_filters": [[32, 8, 4], [64, 4, 2], [64, 3, 1]],
    "conv_hidden": 512,
    "vf_share_layers": False,
    "free_log_std": True,
}


#: The activations of the default model's hidden layers (the ``"activation"`` model key).
ACTIVATIONS = ("tanh", "relu", "silu")


@dataclass(frozen=True)
class PolicySpec:
    """One policy: per-policy overrides of the training config, spaces and model.

    Attributes:
        observation_space: None: inferred from the first agent mapped to this policy.
        action_space: None: inferred like ``observation_space``.
        config: overrides of training fields for this policy only (``lr``, ``gamma``,
            ``lambda_``, ``clip_param``, ``entropy_coeff``, ``vf_coeff``, ``num_epochs``,
            ``minibatch_size``, ``grad_clip``, ``vf_clip_param``).
        model: overrides of :data:`DEFAULT_MODEL` keys, or ``{"module": factory}`` where
            ``factory(observation_space, action_space, model_config) -> torch.nn.Module`` builds
            a module whose ``forward(obs) -> (dist_inputs, values)``. It gets the observations
            as they are, batched as tensors: a Discrete observation as an integer tensor of
            values, not one-hot encoded as the default model does. Masks stay outside the
            module: with masked observations it gets the space of what it sees, the
            ``"observation"`` part (a Tuple of the members' parts for a grouped agent). A
            factory with a ``model_keys`` attribute (the keys it reads) has any other key
            refused by name, besides the default model's.
    """

    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)


#: A policy entry: None (learned, defaults), a PolicySpec, or a fixed ``fn(observation) -> action``.
PolicyEntry = Union[None, PolicySpec, Callable[[Any], Any]]

PER_POLICY_FIELDS = (
    "lr", "gamma", "lambda_", "clip_param", "entropy_coeff", "vf_coeff", "num_epochs",
    "minibatch_size", "grad_clip", "vf_clip_param", "use_kl_loss", "kl_coeff", "kl_target",
)


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda value: _integer(value) and value >= low


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _whole(value: Any) -> bool:
    """A whole number of at least 0, as an int or a float (``1e6`` from JSON)."""
    return _number(value) and float(value).is_integer() and value >= 0


def _or_schedule(value_ok: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A value ``value_ok`` takes, or RLlib's schedule of such values: ``[[env_steps, value], ...]``,
    the first at step 0 and the steps increasing (see :func:`scheduled`)."""

    def check(value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return value_ok(value)
        pairs = all(isinstance(pair, (list, tuple)) and len(pair) == 2 and _whole(pair[0]) and value_ok(pair[1])
                    for pair in value)
        return (pairs and len(value) >= 1 and value[0][0] == 0
                and all(earlier[0] < later[0] for earlier, later in itertools.pairwise(value)))

    return check


def scheduled(value: float | list[list[float]], env_steps: int) -> float:
    """A setting at ``env_steps`` sampled: a number as it is; RLlib's schedule ``[[env_steps,
    value], ...]`` interpolated linearly between its points and held after the last.

    Example:
        >>> scheduled([[0, 1e-3], [1000, 1e-4]], 500), scheduled([[0, 1e-3], [1000, 1e-4]], 5000)
        (0.00055, 0.0001)
    """
    if not isinstance(value, (list, tuple)):
        return float(value)
    return float(np.interp(env_steps, [float(step) for step, _ in value], [float(at) for _, at in value]))


#: RLlib's names (older ones too) that this config spells otherwise -> what to write here.
RLLIB_NAMES: dict[str, str] = {
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
    "lambda": "lambda_",
    "vf_loss_coeff": "vf_coeff, twice RLlib's value (the value loss here is half the mean squared error)",
    "lr_schedule": "lr, which takes the schedule itself: lr=[[0, 1e-3], [1000000, 1e-4]]",
    "entropy_coeff_schedule": "entropy_coeff, which takes the schedule itself: entropy_coeff=[[0, 0.01], [1000000, 0.0]]",
    "num_rollout_workers": "num_env_runners (in env_runners())",
    "num_workers": "num_env_runners (in env_runners())",
    "num_envs_per_worker": "num_envs_per_env_runner (in env_runners())",
    "train_batch_size_per_learner": "train_batch_size (env steps over all runners; there is one learner)",
    "evaluation_num_env_runners": "nothing: evaluate() plays in the driver",
    "evaluation_num_workers": "nothing: evaluate() plays in the driver",
    "num_gpus": "resources(device='cuda') for the learner (env runners infer on CPU)",
    "num_gpus_per_learner": "resources(device='cuda') for the learner (env runners infer on CPU)",
    "fcnet_hiddens": "model={'hiddens': [...]} (the default model's keys are hiddens, activation, ...)",
    "fcnet_activation": "model={'activation': ...} (the default model's keys are hiddens, activation, ...)",
    "explore": "evaluation_explore for evaluate(); learned policies always explore while they train",
}


def rllib_hint(key: str) -> str | None:
    """What to write here for RLlib's setting ``key`` (None when RLlib has no such name)."""
    instead = RLLIB_NAMES.get(key)
    return None if instead is None else f"{key!r} is RLlib's name; write {instead}"


def _clip(value: Any) -> bool:
    """None, or a clip range above 0 (inf: no clipping)."""
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0)


def _log_level(value: Any) -> bool:
    """A level logging knows: a number, or one of its names (``"WARN"`` too; names are case-sensitive)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and isinstance(logging.getLevelName(value), int))


def _positive_ints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_integer(x) and x >= 1 for x in value)


def _conv_filters(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(layer, (list, tuple)) and len(layer) == 3 and _positive_ints(layer) for layer in value
    )


#: The rule of a setting that is a bool (numpy's too: values read back from arrays).
TRUE_OR_FALSE: tuple[str, Callable[[Any], bool]] = ("true or false", lambda v: isinstance(v, (bool, np.bool_)))

#: Model key -> (what it must be, the test of a value), for the default model (not a "module").
_MODEL_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "hiddens": ("a list of layer sizes (integers of at least 1)", _positive_ints),
    "activation": (f"one of {list(ACTIVATIONS)}", lambda v: v in ACTIVATIONS),
    "conv_filters": ("a list of [channels, kernel, stride] triples of integers of at least 1", _conv_filters),
    "conv_hidden": ("an integer of at least 1", _int_at_least(1)),
    "vf_share_layers": TRUE_OR_FALSE,
    "free_log_std": TRUE_OR_FALSE,
}

#: field -> (what it must be, the test of a value). Checked by :meth:`PPOConfig.validate`.
_FIELD_RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "num_env_runners": ("an integer of at least 0", _int_at_least(0)),
    "num_envs_per_env_runner": ("an integer of at least 1", _int_at_least(1)),
    "rollout_fragment_length": ("'auto' or an integer of at least 1", lambda v: v == "auto" or _int_at_least(1)(v)),
    "max_runner_restarts": ("an integer of at least 0", _int_at_least(0)),
    "sample_timeout_s": ("None or a number above 0", _optional(lambda v: _number(v) and v > 0)),
    "max_env_errors_in_a_row": ("an integer of at least 1", _int_at_least(1)),
    "vector_mode": ("'sync' or 'async'", lambda v: v in ("sync", "async")),
    "vector_num_workers": ("None or an integer of at least 1", _optional(_int_at_least(1))),
    "lr": ("a number above 0, or a schedule [[env_steps, lr], ...] from step 0, its steps increasing",
           _or_schedule(lambda v: _number(v) and v > 0)),
    "gamma": ("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1),
    "lambda_": ("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1),
    "clip_param": ("a number above 0", lambda v: _number(v) and v > 0),
    "vf_clip_param": ("None or a number above 0 (inf: no clipping)", _clip),
    "num_epochs": ("an integer of at least 1", _int_at_least(1)),
    "minibatch_size": ("an integer of at least 1", _int_at_least(1)),
    "train_batch_size": ("an integer of at least 1", _int_at_least(1)),
    "entropy_coeff": ("a number, or a schedule [[env_steps, coefficient], ...] from step 0, its steps increasing",
                      _or_schedule(_number)),
    "vf_coeff": ("a number of at least 0", lambda v: _number(v) and v >= 0),
    "grad_clip": ("None or a number above 0 (inf: no clipping)", _clip),
    "normalize_advantages": ("true or false", lambda v: isinstance(v, bool)),
    "use_kl_loss": ("true or false", lambda v: isinstance(v, bool)),
    "kl_coeff": ("a number of at least 0", lambda v: _number(v) and v >= 0),
    "kl_target": ("a number above 0", lambda v: _number(v) and v > 0),
    "normalize_actions": ("true or false", lambda v: isinstance(v, bool)),
    "num_cpus": ("None or an integer of at least 1", _optional(_int_at_least(1))),
    "ray_address": ("None or a string (host:port, ray://host:port, auto or local)", _optional(lambda v: isinstance(v, str))),
    "device": ("'auto', 'cpu', 'cuda' or 'cuda:N'",
               lambda v: isinstance(v, str) and (v in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", v) is not None)),
    "torch_threads": ("None or an integer of at least 1", _optional(_int_at_least(1))),
    "sampling_torch_threads": ("an integer of at least 1", _int_at_least(1)),
    "seed": ("None or an integer of at least 0", _optional(_int_at_least(0))),
    "log_level": ("a logging level (a number, or a name such as 'WARNING' or 'INFO')", _log_level),
    "env_config": ("a dict", lambda v: isinstance(v, Mapping)),
    "policies": ("a dict of policy id (a string) to None, a PolicySpec (or RLlib's) or a callable",
                 lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v)),
    "policy_mapping_fn": ("a function (or its 'module:name' import path)", callable),
    "policies_to_train": ("None, a list of policy ids or RLlib's fn(policy_id, batch) -> bool",
                          _optional(lambda v: (callable(v) and not inspect.isclass(v))
                                    or (isinstance(v, list) and all(isinstance(p, str) for p in v)))),
    "model": ("a dict of model settings", lambda v: isinstance(v, Mapping)),
    "evaluation_interval": ("None or an integer of at least 1", _optional(_int_at_least(1))),
    "evaluation_duration": ("an integer of at least 1", _int_at_least(1)),
    "evaluation_duration_unit": ("'episodes' or 'timesteps'", lambda v: v in ("episodes", "timesteps")),
    "evaluation_explore": ("true or false", lambda v: isinstance(v, bool)),
}
#: Each builder method -> the fields it sets; its name may prefix them in ``set("training.lr", ...)``.
SECTIONS: dict[str, tuple[str, ...]] = {
    "environment": ("env", "env_config", "normalize_actions"),
    "multi_agent": ("policies", "policy_mapping_fn", "policies_to_train"),
    "env_runners": ("num_env_runners", "num_envs_per_env_runner", "rollout_fragment_length", "max_runner_restarts",
                    "sample_timeout_s", "max_env_errors_in_a_row", "vector_mode", "vector_num_workers"),
    "training": ("lr", "gamma", "lambda_", "clip_param", "vf_clip_param", "num_epochs", "minibatch_size",
                 "train_batch_size", "entropy_coeff", "vf_coeff", "grad_clip", "normalize_advantages", "use_kl_loss",
                 "kl_coeff", "kl_target", "model"),
    "resources": ("ray_address", "num_cpus", "device", "torch_threads", "sampling_torch_threads"),
    "debugging": ("seed", "log_level"),
    "evaluation": ("evaluation_interval", "evaluation_duration", "evaluation_duration_unit", "evaluation_explore"),
}
_SECTION_OF = {name: section for section, names in SECTIONS.items() for name in names}
_INTEGER_FIELDS = frozenset(name for name, (what, _) in _FIELD_RULES.items() if "integer" in what)


def _normalized(name: str, value: Any) -> Any:
    """``value`` in the type its field uses, when that loses nothing: numpy scalars as Python
    numbers, whole floats as ints in integer fields (``8e2`` from the command line), a
    ``torch.device`` as its name, a tuple of policy ids as a list. Anything else as it is."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)) and name in _INTEGER_FIELDS and float(value).is_integer():
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if name == "device" and type(value).__module__.startswith("torch"):
        return str(value)
    if name == "policies_to_train" and isinstance(value, tuple):
        return list(value)
    if name == "policy_mapping_fn" and isinstance(value, str):
        return _import_path(value, name)
    if name == "model" and isinstance(value, Mapping) and isinstance(value.get("module"), str):
        return {**value, "module": _import_path(value["module"], "model['module']")}
    return value


def _check_fields(values: Mapping[str, Any], where: str = "", rules: Mapping[str, tuple[str, Any]] = _FIELD_RULES) -> None:
    """Raise ConfigError naming the first field of ``values`` that breaks its rule."""
    for name, value in values.items():
        rule = rules.get(name)
        if rule is not None and not rule[1](value):
            raise ConfigError(f"{where}{name} must be {rule[0]}, received {value!r}")


_RLLIB_SPEC_FIELDS = ("policy_class", "observation_space", "action_space", "config")


def policy_entry(policy_id: PolicyID, entry: Any) -> PolicyEntry:
    """``entry`` as a policy entry: None, a PolicySpec or a callable (a fixed policy) as it is;
    RLlib's forms, its ``PolicySpec`` or a ``(policy_class, observation_space, action_space,
    config)`` tuple, with no policy class (this trainer's PPO learns the policy), as a PolicySpec.

    Raises:
        ConfigError: anything else, by policy id.
    """
    if inspect.isclass(entry):  # callable, but calling it with an observation builds an object
        raise ConfigError(f"policy {policy_id!r}: expected None, a PolicySpec or a callable fn(observation) -> "
                          f"action, received the class {entry!r} (RLlib's policy classes do not run here: this "
                          "trainer's PPO learns every learned policy)")
    if entry is None or isinstance(entry, PolicySpec) or callable(entry):
        return entry
    parts: tuple[Any, ...] | None = None
    if isinstance(entry, (tuple, list)) and len(entry) == len(_RLLIB_SPEC_FIELDS):
        parts = tuple(entry)
    elif all(hasattr(entry, name) for name in _RLLIB_SPEC_FIELDS):
        parts = tuple(getattr(entry, name) for name in _RLLIB_SPEC_FIELDS)
    if parts is None:
        raise ConfigError(f"policy {policy_id!r}: expected None, a PolicySpec or a callable, received {entry!r}")
    policy_class, observation_space, action_space, config = parts
    if policy_class is not None:
        raise ConfigError(f"policy {policy_id!r}: RLlib's policy class {policy_class!r} does not run here: this "
                          "trainer's PPO learns every learned policy; give None as the class")
    if config is not None and not isinstance(config, Mapping):  # an AlgorithmConfig, say
        raise ConfigError(f"policy {policy_id!r}: the config of an RLlib PolicySpec must be a dict of training "
                          f"settings here, received {a_type(config)}")
    settings = dict(config or {})
    model = settings.pop("model", None)  # RLlib keeps the policy's model settings in its config
    model = {} if model is None else model
    if not isinstance(model, Mapping):
        raise ConfigError(f"policy {policy_id!r}: the 'model' in its RLlib config must be a dict of model settings, "
                          f"received {model!r}")
    return PolicySpec(observation_space, action_space, settings, dict(model))


def asked_to_train(ask: Callable[..., Any], learned: Iterable[PolicyID]) -> list[PolicyID]:
    """The ``learned`` policies that RLlib's callable form of ``policies_to_train`` accepts, each
    asked ``ask(policy_id, None)`` once (there is no batch to show it)."""
    chosen = []
    for policy_id in learned:
        try:
            accepted = ask(policy_id, None)
        except Exception as error:
            raise ConfigError(f"policies_to_train {ask!r} raised {type(error).__name__} when asked "
                              f"policies_to_train({policy_id!r}, None): {error}") from error
        if accepted:
            chosen.append(policy_id)
    return chosen


def _is_collection(value: Any) -> bool:
    """Whether ``value`` is a collection of ids: iterable, but not a string or a mapping."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))


def checked_mapping_fn(value: Any) -> Callable[..., PolicyID]:
    """A ``policy_mapping_fn`` handed to a built algorithm: a function, or its ``"module:name"``
    import path (imported here).

    Raises:
        ConfigError: anything else, named.
    """
    value = _normalized("policy_mapping_fn", value)
    _check_fields({"policy_mapping_fn": value})
    return value


def map_agent(mapping_fn: Callable[..., PolicyID], agent_id: str, episode: Any) -> PolicyID:
    """``mapping_fn(agent_id, episode)``; an exception it raises is a ConfigError naming the
    agent and how the function is called (RLlib's older ``(agent_id, episode, worker)`` form, say)."""
    try:
        return mapping_fn(agent_id, episode)
    except Exception as error:
        raise ConfigError(f"policy_mapping_fn raised {type(error).__name__} for agent {agent_id!r}: {error}; "
                          "it is called as policy_mapping_fn(agent_id, episode)") from error


def default_policy_mapping_fn(agent_id: str, episode: Any, **kwargs: Any) -> PolicyID:
    """Map every agent to ``"default_policy"`` (RLlib's default)."""
    return DEFAULT_POLICY


@dataclass
class PPOConfig:
    """The trainer's configuration. Builders return ``self`` so calls chain as in RLlib."""

    # environment
    env: Any = None
    """A MultiAgentEnv class or ``creator(env_config) -> env``, or its ``"module:name"`` import path."""
    env_config: dict[str, Any] = field(default_factory=dict)
    """Passed to the env creator."""
    normalize_actions: bool = True
    """As RLlib's: learned policies act in [-1, 1] on a float Box action space bounded in every
    entry, mapped linearly onto its bounds (then clipped to them) before the env gets the action,
    so the Gaussian's start (mean 0, std 1) covers the space whatever its units. False, or a Box
    with an unbounded entry: the Gaussian acts in the env's units, clipped to the bounds.
    A checkpoint saved before this option existed loads with False, as its policies learned."""

    # multi-agent
    policies: dict[PolicyID, Any] = field(default_factory=dict)
    """Policy id -> None, PolicySpec or fixed callable; empty means one ``"default_policy"``."""
    policy_mapping_fn: Callable[..., PolicyID] = default_policy_mapping_fn
    """``fn(agent_id, episode, **kwargs) -> policy_id``, called when an agent first appears in an episode."""
    policies_to_train: list[PolicyID] | Callable[..., bool] | None = None
    """Learned policies to update; None: every learned (non-callable) policy. RLlib's callable
    form, ``fn(policy_id, batch) -> bool``, is asked once per learned policy (``batch=None``)
    when the algorithm is built; the algorithm's config and its checkpoints hold the list of
    those it accepted, this config keeps the callable."""

    # env runners
    num_env_runners: int = 0
    """Ray actors stepping envs; 0 samples in the driver."""
    num_envs_per_env_runner: int = 8
    """Envs stepped together by each runner (one batched forward pass per policy)."""
    rollout_fragment_length: int | str = "auto"
    """Env steps of each env in one fragment, the unit a runner samples ``train_batch_size`` in
    (its share of the batch, rounded up to whole fragments); "auto": the batch split over all envs."""
    max_runner_restarts: int = 3
    """Restarts of one runner allowed within one iteration before the iteration fails."""
    sample_timeout_s: float | None = None
    """Seconds one runner's sample call may take; a runner that takes longer is taken as hung (an
    env whose step or reset never returns), killed and replaced, which counts as a restart. A new
    runner's start (its process, imports and envs) does not count: it may take up to
    ``max(sample_timeout_s, 120)`` seconds before it is replaced too. None: wait as long as it
    takes. Runners only: with 0 runners the driver samples itself."""
    max_env_errors_in_a_row: int = 10
    """Failures of one env without a finished episode in between before the run stops (an env that
    fails in every episode never trains anything)."""
    vector_mode: Literal["sync", "async"] = "sync"
    """How each runner (and the driver, with 0 runners) steps its envs: "sync" in its own process,
    "async" in worker processes (a :class:`~marl_core.vector.VectorMultiAgentEnv`); "async" pays
    off when env steps are expensive next to a round trip between processes."""
    vector_num_workers: int | None = None
    """"async" only: worker processes per runner (default: one per env)."""

    # training
    lr: float | list[list[float]] = 3e-4
    """Adam learning rate, or RLlib's schedule of it, ``[[env_steps, lr], ...]`` (the first at step
    0): interpolated linearly in the env steps sampled so far, this iteration's included, and
    held after the last point (the value in use is reported as ``curr_lr``)."""
    gamma: float = 0.99
    """Discount factor."""
    lambda_: float = 0.95
    """GAE lambda."""
    clip_param: float = 0.2
    """PPO surrogate clip range."""
    vf_clip_param: float | None = None
    """As RLlib's: each sample's squared value error is capped at this (errors beyond its square
    root give the value function no gradient); None: no cap."""
    num_epochs: int = 4
    """Passes over each train batch."""
    minibatch_size: int = 128
    """Agent steps per SGD minibatch; a policy's batch smaller than this is one minibatch (its
    batch holds its agents' steps, which need not match ``train_batch_size``, so a larger value is
    not refused as RLlib refuses it)."""
    train_batch_size: int = 2000
    """Env steps sampled per iteration (over all runners): ``step()`` calls, so one agent's turn in
    a turn-based env (a PettingZoo AEC env, an OpenSpiel game) and every live agent's move in a
    parallel one, as RLlib counts env steps."""
    entropy_coeff: float | list[list[float]] = 0.0
    """Entropy bonus weight, or a schedule of it as ``lr`` takes one (reported as ``curr_entropy_coeff``)."""
    vf_coeff: float = 0.5
    """Value loss weight. The value loss is half the mean squared error (CleanRL's), so RLlib's
    ``vf_loss_coeff`` (on the whole mean squared error) is ``vf_coeff / 2``."""
    grad_clip: float | None = 0.5
    """Max global gradient norm; None: no clipping."""
    normalize_advantages: bool = True
    """Normalize advantages per policy over its train batch."""
    use_kl_loss: bool = False
    """Add RLlib's KL penalty, ``kl_coeff`` times the KL divergence of the new policy from the
    one that sampled the batch (estimated on the sampled actions as ``(ratio - 1) - log ratio``),
    to the clipped surrogate. RLlib's PPO has it on; here it is off by default (the clipped
    surrogate alone, which the presets are tuned for)."""
    kl_coeff: float = 0.2
    """The KL penalty's starting coefficient; after each update it is adapted as RLlib adapts it
    (times 1.5 when the update's mean KL exceeded twice ``kl_target``, times 0.5 when it was
    under half of it), kept per policy in checkpoints and reported as ``curr_kl_coeff``."""
    kl_target: float = 0.01
    """The KL divergence per update that ``kl_coeff`` is adapted towards."""
    model: dict[str, Any] = field(default_factory=dict)
    """Overrides of DEFAULT_MODEL for every learned policy."""

    # resources
    ray_address: str | None = None
    """None: start a local Ray with ``num_cpus``; otherwise the cluster to join ("auto" works)."""
    num_cpus: int | None = None
    """CPUs for a local Ray; None lets Ray decide."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Learner device; runners always infer on CPU."""
    torch_threads: int | None = None
    """torch threads of the learner in the driver when set (None: torch's default)."""
    sampling_torch_threads: int = 1
    """torch threads while sampling, in every runner and in the driver (``num_env_runners=0``):
    batched forward passes of small models run fastest on one thread."""

    # evaluation
    evaluation_interval: int | None = None
    """Every this many iterations, ``train()`` also evaluates (:meth:`PPO.evaluate`) and puts the
    figures under ``result["evaluation"]``; None: never (``evaluate()`` may still be called)."""
    evaluation_duration: int = 10
    """How much :meth:`PPO.evaluate` plays: episodes, or env steps (whole episodes until at least
    this many), after ``evaluation_duration_unit``."""
    evaluation_duration_unit: Literal["episodes", "timesteps"] = "episodes"
    """What ``evaluation_duration`` counts."""
    evaluation_explore: bool = False
    """Whether learned policies sample their actions while evaluating (False: the most likely
    action, as RLlib's ``evaluation_config={"explore": False}``)."""

    # debugging
    seed: int | None = 0
    """Seeds torch, numpy, every env (runner r, env i: seed + 1000 * r + i) and minibatch order."""
    log_level: str = "WARNING"
    """Logging level inside the env runners."""

    # Builders ---------------------------------------------------------------------------------

    def environment(self, env: Any = None, *, env_config: Mapping[str, Any] | None = None,
                    normalize_actions: bool | None = None) -> PPOConfig:
        """Set the env (class, creator or ``"module:name"``), its config and ``normalize_actions``.

        The env is built as ``env(env_config)``, as RLlib builds it; an env taking no argument is
        built as ``env()``, and then a non-empty ``env_config`` is refused when the algorithm is
        built (it would be dropped).
        """
        if env is not None:
            self.env = env
        if env_config is not None:
            self.env_config = dict(env_config) if isinstance(env_config, Mapping) else env_config  # else refused by validate()
        if normalize_actions is not None:
            self.normalize_actions = normalize_actions
        return self

    def multi_agent(
        self,
        *,
        policies: Mapping[PolicyID, PolicyEntry] | set[PolicyID] | list[PolicyID] | None = None,
        policy_mapping_fn: Callable[..., PolicyID] | None = None,
        policies_to_train: list[PolicyID] | Callable[..., bool] | None = None,
        count_steps_by: str = "env_steps",
    ) -> PPOConfig:
        """Set policies (a dict, or a set/list of ids meaning learned defaults) and their mapping;
        ``policies_to_train`` is a list of ids, or RLlib's ``fn(policy_id, batch) -> bool`` (see the field).
        RLlib's ``count_steps_by`` is taken as ``"env_steps"``, the only count here."""
        if count_steps_by != "env_steps":
            raise ConfigError(f"count_steps_by={count_steps_by!r}: train_batch_size counts env steps here "
                              "(step() calls), as RLlib's default 'env_steps' does")
        # Collections of ids (a list, set or dict view) are taken; a string (which would be split into
        # characters), a callable or a number is left for validate() to refuse by name.
        if policies is not None:
            if isinstance(policies, Mapping):
                self.policies = dict(policies)
            else:
                self.policies = dict.fromkeys(policies) if _is_collection(policies) else policies
        if policy_mapping_fn is not None:
            self.policy_mapping_fn = policy_mapping_fn
        if policies_to_train is not None:
            self.policies_to_train = list(policies_to_train) if _is_collection(policies_to_train) else policies_to_train
        return self

    def env_runners(self, **kwargs: Any) -> PPOConfig:
        """Set ``num_env_runners``, ``num_envs_per_env_runner``, ``rollout_fragment_length``,
        ``vector_mode``, ``vector_num_workers``, ..."""
        return self._update("env_runners", kwargs)

    def training(self, **kwargs: Any) -> PPOConfig:
        """Set ``lr``, ``gamma``, ``lambda_``, ``clip_param``, ``num_epochs``, ``minibatch_size``, ...;
        a ``model`` dict updates the model settings already set (as RLlib's does)."""
        model = kwargs.get("model")
        if isinstance(model, Mapping) and isinstance(self.model, Mapping):
            kwargs = {**kwargs, "model": {**self.model, **model}}
        return self._update("training", kwargs)

    def framework(self, framework: str = "torch", **kwargs: Any) -> PPOConfig:
        """RLlib's framework choice: this trainer runs torch, so ``"torch"`` is taken (a no-op)."""
        if framework != "torch":
            raise ConfigError(f"framework {framework!r}: this trainer runs torch only; write .framework('torch') "
                              "or leave it out")
        return self

    def api_stack(self, **kwargs: Any) -> PPOConfig:
        """RLlib's API stack switch: this trainer has one stack, so any setting is taken (a no-op)."""
        return self

    @classmethod
    def overrides(cls, **kwargs: Any) -> dict[str, Any]:
        """Overrides as RLlib's ``PPOConfig.overrides(...)`` gives them, checked by name: a
        policy's training settings (``PolicySpec(config=PPOConfig.overrides(lr=1e-4))``), with a
        ``model`` only in RLlib's PolicySpec forms (ours takes it as ``PolicySpec(model=...)``), or
        ``explore`` for ``evaluation(evaluation_config=...)``."""
        training = {key: value for key, value in kwargs.items() if key not in ("explore", "model")}
        cls().for_policy(PolicySpec(config=training))
        if "explore" in kwargs and not isinstance(kwargs["explore"], (bool, np.bool_)):
            raise ConfigError(f"explore must be true or false, received {kwargs['explore']!r}")
        if "model" in kwargs and not isinstance(kwargs["model"], Mapping):
            raise ConfigError(f"model must be a dict of model settings, received {kwargs['model']!r}")
        return dict(kwargs)

    # RLlib's builders with no counterpart here: refused with what to do instead.

    def callbacks(self, *args: Any, **kwargs: Any) -> PPOConfig:
        """Not here: ``train()`` returns every metric; run your code on its result after each call."""
        raise ConfigError("callbacks() is RLlib's; this trainer takes no callbacks: read the metrics train() returns "
                          "after each call (per policy under result['policies'], evaluate()'s under result['evaluation'])")

    def rl_module(self, *args: Any, **kwargs: Any) -> PPOConfig:
        """Not here: models are set through ``model`` (PolicySpec's too)."""
        raise ConfigError("rl_module() is RLlib's; set the model through training(model={...}) or a policy's "
                          "PolicySpec(model={...}), a torch module through model={'module': factory}")

    def learners(self, *args: Any, **kwargs: Any) -> PPOConfig:
        """Not here: one learner in the driver (``resources(device=...)`` picks its device)."""
        raise ConfigError("learners() is RLlib's; this trainer learns in the driver: resources(device='cuda') "
                          "puts the learner on a GPU")

    def rollouts(self, *args: Any, **kwargs: Any) -> PPOConfig:
        """RLlib's older name of :meth:`env_runners` (its older option names too): refused, with the new names."""
        hints = [hint for key in kwargs if (hint := rllib_hint(key))]
        raise ConfigError("rollouts() is RLlib's older name of env_runners(); write env_runners(...)"
                          + "".join(f"; {hint}" for hint in hints))

    def resources(self, **kwargs: Any) -> PPOConfig:
        """Set ``ray_address``, ``num_cpus``, ``device``, ``torch_threads`` and ``sampling_torch_threads``."""
        return self._update("resources", kwargs)

    def debugging(self, **kwargs: Any) -> PPOConfig:
        """Set ``seed`` and ``log_level``."""
        return self._update("debugging", kwargs)

    def evaluation(self, *, evaluation_config: Mapping[str, Any] | None = None, **kwargs: Any) -> PPOConfig:
        """Set ``evaluation_interval``, ``evaluation_duration``, ``evaluation_duration_unit`` and
        ``evaluation_explore``; RLlib's ``evaluation_config={"explore": ...}`` sets the last one
        (its other keys are refused by name: evaluation runs with the training config)."""
        if evaluation_config is not None:
            if not isinstance(evaluation_config, Mapping):
                raise ConfigError(f"evaluation_config must be a dict such as {{'explore': False}}, received "
                                  f"{evaluation_config!r}")
            others = sorted(map(str, set(evaluation_config) - {"explore"}))
            if others:
                raise ConfigError(f"evaluation_config takes only 'explore' here, received {others}: evaluation "
                                  "runs with the training config's env, env_config and policies")
            if "explore" in evaluation_config:
                kwargs = {"evaluation_explore": evaluation_config["explore"], **kwargs}
        return self._update("evaluation", kwargs)

    def _update(self, section: str, kwargs: Mapping[str, Any]) -> PPOConfig:
        """Set ``kwargs``: fields of ``section`` (of any section for ``"from_checkpoint"``)."""
        names = SECTIONS.get(section) or [f.name for f in fields(self)]
        for key, value in kwargs.items():
            if key not in names:
                elsewhere = _SECTION_OF.get(key)
                if elsewhere:
                    raise ConfigError(f"{section}() does not set {key!r}, {elsewhere}() does")
                raise ConfigError(rllib_hint(key) or f"unknown {section}() option {key!r}; known options: {sorted(names)}")
            setattr(self, key, value)
        return self

    def set(self, key: str, value: Any) -> PPOConfig:
        """Set one field from text, e.g. ``set("training.lr", "3e-4")`` (the section is optional).

        Values are parsed as JSON when they can be (numbers, booleans, null, lists, dicts) and
        kept as strings otherwise; ``policy_mapping_fn`` takes a ``"module:name"`` import path. A
        JSON object for ``model`` or ``env_config`` merges into the dict already there (its keys
        replace those), so ``model='{"hiddens": [64]}'`` keeps a preset's other model settings.
        """
        section, _, name = key.rpartition(".")
        known = {f.name for f in fields(self)}
        if section == "model":
            raise ConfigError(f"{key!r}: model keys are set through the model field, as a JSON object: "
                              f"model='{{\"{name}\": ...}}'")
        if section and section not in SECTIONS:
            if name not in known and (hint := rllib_hint(name)):
                raise ConfigError(hint)
            alone = f" (or the field alone, {name!r})" if name in known else ""
            raise ConfigError(f"unknown config section {section!r} in {key!r}; sections: {sorted(SECTIONS)}{alone}")
        if name not in known:
            raise ConfigError(rllib_hint(name) or f"unknown config field {key!r}; known fields: "
                                                  f"{sorted(f.name for f in fields(self))}")
        if section and name not in SECTIONS[section]:
            raise ConfigError(f"{key!r}: {name} is in section {_SECTION_OF[name]}, not {section} "
                              f"({_SECTION_OF[name]}.{name}, or {name} alone)")
        if isinstance(value, str):
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        if name == "policy_mapping_fn" and isinstance(value, str):
            value = _import_path(value, name)
        if name in ("model", "env_config") and isinstance(value, Mapping) and isinstance(getattr(self, name), Mapping):
            value = {**getattr(self, name), **value}
        setattr(self, name, value)
        return self

    def copy(self) -> PPOConfig:
        """A shallow copy whose mapping and list fields are copied too, as dicts and lists (a value
        of another type is kept as it is, for :meth:`validate` to refuse by name)."""
        out = dataclasses.replace(self)
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                setattr(out, f.name, dict(value))
            elif isinstance(value, list):
                setattr(out, f.name, list(value))
        return out

    def build(self) -> PPO:
        """Build the algorithm (starts Ray when ``num_env_runners > 0``).

        Ray and the runner actors start first, so they come up while the driver loads torch.

        Raises:
            ConfigError: a field out of its range or of the wrong type (see :meth:`validate`).
        """
        self.validate()
        runners = None
        if self.num_env_runners > 0:
            from marl_core.ppo.runners import RunnerGroup

            runners = RunnerGroup.for_config(self, self.env_creator())
        try:
            from marl_core.ppo.algorithm import PPO
        except BaseException:
            if runners is not None:
                runners.stop()
            raise
        return PPO(self, runners=runners)

    def validate(self, names: Iterable[str] | None = None) -> None:
        """Raise :class:`~marl_core.errors.ConfigError` naming the first field that is out of its
        range or of the wrong type (``lr=-1``, ``gamma=1.5``, ``minibatch_size=0``, ``num_epochs=2.5``),
        in the config, the policies' ``PolicySpec.config`` overrides or the model settings (keys
        the default model does not read, RLlib's ``fcnet_hiddens`` among them, included).

        Lossless forms are taken and stored in the field's own type: numpy scalars, whole floats
        in integer fields, a ``torch.device``, a tuple of policy ids.

        Args:
            names: check only these fields (and the policies' settings when ``policies`` or
                ``model`` is among them); None: every field.
        """
        names = [f.name for f in fields(self)] if names is None else list(names)
        for name in names:
            setattr(self, name, _normalized(name, getattr(self, name)))
        _check_fields({name: getattr(self, name) for name in names})
        named = set(names)
        if "policies" in named:
            self.policies = {policy_id: policy_entry(policy_id, entry) for policy_id, entry in self.policies.items()}
        if not {"policies", "model", *PER_POLICY_FIELDS} & named:
            return
        models = bool({"policies", "model"} & named)  # a training override leaves the saved models be
        for policy_id, entry in self.policy_entries().items():
            if entry is None or isinstance(entry, PolicySpec):  # a learned policy
                self.check_policy(policy_id, entry, model_keys=None if models else ())

    def _asked_to_train(self, ask: Callable[..., Any]) -> list[PolicyID] | None:
        """:func:`asked_to_train` over the learned policies (None without a dict of policies)."""
        if not isinstance(self.policies, Mapping):
            return None
        fixed = {p for p, entry in self.policy_entries().items()
                 if entry is not None and not isinstance(entry, PolicySpec) and callable(entry) and not inspect.isclass(entry)}
        return asked_to_train(ask, [p for p in self.policy_entries() if p not in fixed])

    def check_policy(self, policy_id: PolicyID, spec: PolicySpec | None, *, model_keys: Iterable[str] | None = None) -> None:
        """Raise :class:`~marl_core.errors.ConfigError` unless the learned policy ``policy_id``'s
        training overrides and model settings (with this config's) are valid; ``model_keys``:
        check only these model keys (None: all)."""
        for name in ("config", "model"):
            value = getattr(spec, name, {})
            if not isinstance(value, Mapping):
                raise ConfigError(f"policy {policy_id!r}: PolicySpec.{name} must be a dict, received {value!r}")
        self.for_policy(spec, policy_id)
        model = self.model_for(spec)
        factory = model.get("module")
        if model_keys is not None:
            model = {key: model[key] for key in model_keys if key in model}
        where = f"policy {policy_id!r}: model "
        if factory is not None and not callable(factory):
            raise ConfigError(f"{where}module must be a factory, factory(observation_space, action_space, "
                              f"model_config) -> torch.nn.Module (or, in the config's model, its 'module:name' "
                              f"import path), received {factory!r}")
        if factory is not None:  # a module factory of one's own reads what it likes, or what it says
            reads = getattr(factory, "model_keys", None)
            unknown = sorted(set(model) - set(DEFAULT_MODEL) - {"module"} - set(reads)) if reads is not None else []
            if unknown:
                raise ConfigError(f"{where}has unknown keys {unknown}; its module {reference_of(factory) or factory!r} "
                                  f"reads {sorted(reads)} (and the default model's keys, which it may ignore)")
            return
        unknown = sorted(set(model) - set(DEFAULT_MODEL))
        if unknown:
            raise ConfigError(f"{where}has unknown keys {unknown}; the model reads {sorted(DEFAULT_MODEL)} "
                              f"(or pass {{'module': factory}} for a model of your own)")
        _check_fields(model, where, _MODEL_RULES)

    def env_creator(self) -> Callable[[dict], Any]:
        """``creator(env_config) -> env`` from ``env`` (a class, a creator or ``"module:name"``),
        once the settings the env runners use are checked.
        """
        from marl_core.env import accepts_config

        if self.env is None:
            raise ConfigError("no env: call config.environment(env_class_or_creator) first")
        _check_fields({"vector_mode": self.vector_mode, "sampling_torch_threads": self.sampling_torch_threads})
        target = _import_path(self.env, "env") if isinstance(self.env, str) else self.env
        if not callable(target):
            raise ConfigError(f"config.env must be an env class, a creator or 'module:name', received {self.env!r}")
        if accepts_config(target):
            return target
        if self.env_config:  # the env could not receive it: silently dropping it would train on another env
            raise ConfigError(f"env_config {dict(self.env_config)!r} is set, but the env {self.env!r} takes no "
                              f"argument to receive it: give it a config argument (creator(env_config)), or drop "
                              f"env_config")
        return lambda _config: target()

    # Derived values ---------------------------------------------------------------------------

    def policy_entries(self) -> dict[PolicyID, Any]:
        """The policies, or ``{"default_policy": None}`` when none are set."""
        return dict(self.policies) if self.policies else {DEFAULT_POLICY: None}

    def for_policy(self, spec: PolicySpec | None, policy_id: PolicyID | None = None) -> dict[str, Any]:
        """The training fields of one policy, with its PolicySpec overrides applied (checked)."""
        values = {name: getattr(self, name) for name in PER_POLICY_FIELDS}
        overrides = dict(spec.config) if spec is not None else {}
        unknown = sorted(set(overrides) - set(PER_POLICY_FIELDS))
        whose = f"policy {policy_id!r}: " if policy_id is not None else ""
        if unknown:
            hints = "".join(f"; {hint}" for key in unknown if (hint := rllib_hint(key)))
            if "model" in unknown:  # RLlib's PolicySpec config holds it; ours has a field of its own
                hints += "; a policy's model goes in PolicySpec(model={...})"
            raise ConfigError(f"{whose}PolicySpec.config has unknown keys {unknown}; allowed: {list(PER_POLICY_FIELDS)}"
                              f"{hints}")
        _check_fields(overrides, f"{whose}PolicySpec.config ")
        values.update(overrides)
        return values

    def model_for(self, spec: PolicySpec | None) -> dict[str, Any]:
        """The model config of one policy: defaults, then ``model``, then the spec's ``model``
        (checked by :meth:`validate`)."""
        out = dict(DEFAULT_MODEL)
        out.update(self.model)
        if spec is not None:
            out.update(spec.model)
        return out

    # JSON -------------------------------------------------------------------------------------

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; callables become ``"module:qualname"`` (None when not importable).

        numpy numbers and arrays become numbers and lists (inside ``env_config``, see below); any
        other value without a JSON form becomes ``{"__unsaved__": repr}``, and loading it back
        raises :class:`CheckpointError` unless that field is passed again. ``env_config``, which
        reaches the env's code, comes back exactly: its tuples as tuples, its dicts with keys
        that are not strings with those keys, its numpy arrays (numbers and bools) with their
        dtype and shape, and its gymnasium spaces as spaces (marked ``{"__tuple__": [...]}``,
        ``{"__items__": [[key, value], ...]}``, ``{"__array__": ...}`` and ``{"__space__": ...}``);
        its arrays of objects, strings or records, masked arrays and records are unsaved.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "policies":
                value = {pid: _policy_to_json(policy_entry(pid, entry)) for pid, entry in value.items()}
            elif f.name == "policies_to_train" and callable(value):  # RLlib's form: what it accepts
                value = self._asked_to_train(value)
            elif f.name == "model" and "module" in value:
                value = {**value, "module": reference_of(value["module"])}
            elif callable(value) or f.name == "env":
                value = reference_of(value)
            elif f.name == "env_config":
                value = _exact_to_json(value)
            out[f.name] = value
        return json.loads(json.dumps(out, default=_json_default))

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], **overrides: Any) -> PPOConfig:
        """The inverse of :meth:`to_json_dict`; ``overrides`` replace fields (e.g. callables).

        Raises:
            CheckpointError: parts of the config that did not save or do not import now, all of
                them in one message, each with the argument to pass instead.
        """
        config, problems = cls._restore(data, overrides)
        if problems:
            raise restore_error(problems)
        return config._update("from_checkpoint", overrides)

    @classmethod
    def _restore(
        cls, data: Mapping[str, Any], overrides: Mapping[str, Any], *, require_env: bool = False
    ) -> tuple[PPOConfig, list[str]]:
        """The fields of ``data`` that come back, and what keeps the others from coming back
        (with ``require_env``, as for a checkpoint: an env saved without a name, too)."""
        config = cls()
        names = {f.name for f in fields(cls)}
        problems: list[str] = []
        for key, value in data.items():
            if key not in names or key in overrides:
                continue
            value, field_problems = _field_from_json(key, value)
            problems.extend(field_problems)
            if not field_problems:
                setattr(config, key, value)
        if require_env and data.get("env", "") is None and "env" not in overrides:
            problems.insert(0, "the saved env was not importable by name; pass env=... to from_checkpoint")
        return config, problems


def reference_of(obj: Any) -> str | None:
    """``"module:qualname"`` when ``obj`` can be imported back by that name, else None."""
    if isinstance(obj, str) or obj is None:
        return obj
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    try:
        found = resolve(f"{module}:{qualname}")
    except Exception:
        return None
    return f"{module}:{qualname}" if found is obj else None


def resolve(reference: Any) -> Any:
    """Import ``"module:qualname"``; anything that is not a string is returned as is."""
    if not isinstance(reference, str):
        return reference
    module_name, _, qualname = reference.partition(":")
    if not qualname:
        raise CheckpointError(f"expected 'module:name', received {reference!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _import_path(reference: str, key: str) -> Any:
    """:func:`resolve` for a value given as text: a :class:`ConfigError` naming ``key`` when it
    does not import or is not callable."""
    try:
        target = resolve(reference)
    except CheckpointError as error:
        raise ConfigError(f"{key} must be a 'module:name' import path, received {reference!r}") from error
    except (ImportError, AttributeError, ValueError) as error:
        hint = ""
        if isinstance(error, ModuleNotFoundError):
            hint = ("; is its package installed, or is it in the directory you run from?" if os.getcwd() in sys.path
                    else "; is its package installed? (the working directory is not on sys.path)")
        raise ConfigError(
            f"{key} {reference!r} does not import: {type(error).__name__}: {error}{hint}"
        ) from error
    if not callable(target):
        raise ConfigError(f"{key} must name a function, received {reference!r} ({a_type(target)})")
    return target


def _resolve_saved(reference: str, key: str) -> Any:
    """:func:`resolve` for a name read from a checkpoint: a name that no longer imports (code
    renamed or moved since the save) is a :class:`CheckpointError` saying what to pass instead."""
    try:
        return resolve(reference)
    except (ImportError, AttributeError, ValueError) as error:  # ValueError: an empty module name
        raise CheckpointError(
            f"the checkpoint names {reference!r} ({key}), which does not import now ({type(error).__name__}: "
            f"{error}); pass {key}=... to from_checkpoint"
        ) from error


def _json_default(value: Any) -> Any:
    """The JSON form of what ``json`` cannot write itself (see :meth:`PPOConfig.to_json_dict`)."""
    import numpy as np

    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    return _unsaved(value)


def _unsaved(value: Any) -> dict[str, str]:
    """The mark of a value that did not save (loading it back asks for the field again)."""
    return {"__unsaved__": repr(value)[:200]}


_TUPLE, _ITEMS, _ARRAY, _SPACE = "__tuple__", "__items__", "__array__", "__space__"


def _exact_to_json(value: Any) -> Any:
    """``value`` with its tuples, dicts of non-string keys, numpy arrays and gymnasium spaces
    marked, so JSON keeps them."""
    from gymnasium import spaces

    from marl_core.spaces import space_to_json

    if isinstance(value, spaces.Space):  # first: a Dict space is a Mapping too
        described = space_to_json(value)
        return value if described is None else {_SPACE: described}
    if isinstance(value, tuple):
        return {_TUPLE: [_exact_to_json(v) for v in value]}
    if isinstance(value, Mapping):
        # A dict that looks like one of our markers is written as items too, so it reads back as itself.
        if all(isinstance(k, str) for k in value) and not (len(value) == 1 and set(value) <= {_TUPLE, _ITEMS, _ARRAY, _SPACE}):
            return {k: _exact_to_json(v) for k, v in value.items()}
        return {_ITEMS: [[_exact_to_json(k), _exact_to_json(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_exact_to_json(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and not isinstance(value, np.ma.MaskedArray):
        return {_ARRAY: {"dtype": value.dtype.str, "shape": list(value.shape), "data": value.reshape(-1).tolist()}}
    if isinstance(value, (np.ndarray, np.void)):  # objects, strings, records, masked: not as they were
        return _unsaved(value)
    return value  # without a JSON form: marked unsaved by _json_default


def _exact_from_json(value: Any) -> Any:
    """The inverse of :func:`_exact_to_json` (on JSON it did not write, the identity)."""
    from marl_core.spaces import space_from_json

    if isinstance(value, dict):
        if len(value) == 1 and _TUPLE in value and isinstance(value[_TUPLE], list):
            return tuple(_exact_from_json(v) for v in value[_TUPLE])
        if len(value) == 1 and _ITEMS in value and isinstance(value[_ITEMS], list):
            return {_exact_from_json(k): _exact_from_json(v) for k, v in value[_ITEMS]}
        if len(value) == 1 and _ARRAY in value and isinstance(value[_ARRAY], dict):
            array = value[_ARRAY]
            return np.array(array["data"], dtype=np.dtype(array["dtype"])).reshape(array["shape"])
        if len(value) == 1 and _SPACE in value and isinstance(value[_SPACE], dict):
            return space_from_json(value[_SPACE])
        return {k: _exact_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact_from_json(v) for v in value]
    return value


def _unsaved_paths(value: Any, path: str) -> list[str]:
    """Where in ``value`` (a loaded JSON value) the ``{"__unsaved__": ...}`` markers are."""
    if isinstance(value, Mapping):
        if set(value) == {"__unsaved__"}:
            return [f"{path} ({value['__unsaved__']})"]
        return [p for k, v in value.items() for p in _unsaved_paths(v, f"{path}[{k!r}]")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _unsaved_paths(v, f"{path}[{i}]")]
    return []


def _policy_to_json(entry: Any) -> Any:
    from marl_core.spaces import space_to_json

    if entry is None:
        return {"kind": "learned"}
    if isinstance(entry, PolicySpec):
        model = {k: v for k, v in entry.model.items() if k != "module"}
        if "module" in entry.model:
            model["module"] = reference_of(entry.model["module"])
        out: dict[str, Any] = {"kind": "spec", "config": dict(entry.config), "model": model}
        for name in ("observation_space", "action_space"):
            space = getattr(entry, name)
            if space is not None:  # a space without a JSON form is marked unsaved
                out[name] = space_to_json(space) or _unsaved(space)
        return out
    return {"kind": "fixed", "ref": reference_of(entry)}


def restore_error(problems: list[str]) -> CheckpointError:
    """One error for every part of a saved config that cannot come back."""
    if len(problems) == 1:
        return CheckpointError(problems[0])
    return CheckpointError("parts of the saved config cannot be restored:\n- " + "\n- ".join(problems))


def _field_from_json(key: str, value: Any) -> tuple[Any, list[str]]:
    """One field of :meth:`PPOConfig.to_json_dict` back, and what keeps it (or its parts) from
    coming back, each saying what to pass instead."""
    unsaved = _unsaved_paths(value, key)
    # A policies override replaces the saved dict: it must hold every policy.
    whole = (f" (every policy, {', '.join(map(repr, value))}: the dict replaces the saved one)"
             if key == "policies" and isinstance(value, Mapping) else "")
    if unsaved:
        return None, [f"{', '.join(unsaved)} had no JSON form when the checkpoint was saved; pass {key}=... to "
                      f"from_checkpoint{whole}"]
    try:
        if key == "policies":
            policies, problems = {}, []
            for policy_id, entry in value.items():
                try:
                    policies[policy_id] = _policy_from_json(policy_id, entry)
                except CheckpointError as error:
                    problems.append(f"{error}{whole}")
            return policies, problems
        if key == "env_config":
            return _exact_from_json(value), []
        if key in ("env", "policy_mapping_fn") and value is not None:
            return _resolve_saved(value, key), []
        if key == "model" and "module" in value:
            if value["module"] is None:
                return None, ["the saved model module factory was not importable by name; pass "
                              "model={'module': factory, ...} to from_checkpoint"]
            return {**value, "module": _resolve_saved(value["module"], "model")}, []
        if key == "policy_mapping_fn":
            return None, ["the saved policy_mapping_fn was not importable by name; pass policy_mapping_fn=... to "
                          "from_checkpoint"]
    except CheckpointError as error:
        return None, [str(error)]
    return value, []


def _policy_from_json(policy_id: str, data: Mapping[str, Any]) -> Any:
    from marl_core.spaces import space_from_json

    kind = data.get("kind")
    if kind == "learned":
        return None
    if kind == "spec":
        model = dict(data.get("model", {}))
        if "module" in model:
            if model["module"] is None:
                raise CheckpointError(f"the model module factory of policy {policy_id!r} was not importable by "
                                      "name when saved; pass policies={...} with it to from_checkpoint")
            model["module"] = _resolve_saved(model["module"], "policies")
        saved = {name: data.get(name) for name in ("observation_space", "action_space")}
        if data.get("has_spaces") and saved == {"observation_space": None, "action_space": None}:
            raise CheckpointError(f"the spaces of policy {policy_id!r} were not saved in this older checkpoint; "
                                  "pass policies={...} with them to from_checkpoint")
        return PolicySpec(
            observation_space=None if saved["observation_space"] is None else space_from_json(saved["observation_space"]),
            action_space=None if saved["action_space"] is None else space_from_json(saved["action_space"]),
            config=dict(data.get("config", {})),
            model=model,
        )
    if data.get("ref") is None:
        raise CheckpointError(
            f"fixed policy {policy_id!r} was not importable by name when saved; pass "
            f"policies={{...}} with it to from_checkpoint"
        )
    return _resolve_saved(data["ref"], "policies")
