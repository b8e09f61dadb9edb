"""PPO: builds policies from the env's spaces, samples (driver or Ray runners), updates, reports.

One iteration (:meth:`PPO.train`): broadcast weights, sample ``train_batch_size`` env steps,
concatenate each policy's batch, run its PPO epochs, return a metrics dict namespaced per policy
(``result["policies"][policy_id]``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from marl_core.env import ALL, AgentID
from marl_core.errors import (
    ConfigError,
    EnvContractError,
    EnvRunnerError,
    MultiAgentEnvError,
    SpaceError,
    a_type,
    install_hint,
)
from marl_core.ppo.actions import name_stuck_rows
from marl_core.ppo.batching import concat_obs, listed, stack_obs, unfit_descriptions
from marl_core.ppo.config import (
    DEFAULT_POLICY,
    PolicySpec,
    PPOConfig,
    asked_to_train,
    checked_mapping_fn,
    map_agent,
    policy_entry,
)
from marl_core.ppo.learner import Learner
from marl_core.ppo.model import TorchPolicy
from marl_core.ppo.rollout import Episode, LearnedSpec, Sampler, check_fixed_action, mapped_policy
from marl_core.ppo.runners import RunnerGroup

logger = logging.getLogger(__name__)

PolicyID = str


def _merge(batches: list[dict[str, Any]]) -> dict[str, Any]:
    if len(batches) == 1:
        return batches[0]
    return {key: concat_obs([b[key] for b in batches]) for key in batches[0]}


# What the trainer calls on an env (a MultiAgentEnv, or anything with its API).
_ENV_API = ("possible_agents", "get_observation_space", "get_action_space", "reset", "step")
_ACT_TAG = 0xAC7  # tags compute_actions' stream: no sampler has this worker index
_EVALUATION_TAG = 0xE7A1  # tags evaluate()'s streams (its env seeds and exploring actions) apart from the others


class PPO:
    """Multi-agent PPO: several learned and fixed policies, mapped to agents per episode.

    Semantics:
        - **Policies and mapping**: ``policy_mapping_fn(agent_id, episode)`` is called when an
          agent first appears in an episode, to act or with a reward (``episode.id_`` is unique, ``episode.env_index``
          is the env inside its runner); the answer holds until the episode ends, even when the
          mapping fn is replaced meanwhile. Fixed policies (callables) act but are never trained;
          learned policies not in ``policies_to_train`` act with frozen weights.
        - **Rewards**: each agent's rewards are credited to its most recent action and accumulate
          until its next action or the end of its episode (turn-based games: the reward that
          arrives when the opponent wins goes to the loser's last move; an agent that has ended
          keeps receiving credit until the episode ends). Rewards an agent receives
          before its first action belong to no action: they count in episode returns only.
        - **Dead agents and "__all__"**: an agent that terminates ends its trajectory without a
          bootstrap; a truncated one bootstraps with the value of its final observation (of its
          last observation when the env sends none). ``"__all__"`` ends every trajectory of the
          episode, per agent terminated or truncated as the env says.
        - **Masks**: Dict observations with ``"action_mask"`` get masked logits; a masked action
          is never sampled, in training or in :meth:`compute_actions`. A grouped agent's members
          keep their masks in their slots of the group's Tuple observation; each governs its
          member's slot of the Tuple action.
        - **Seeding**: ``config.seed`` seeds the model initialization (per policy id), the action
          sampling of each runner, every env's first reset (runner r, env i: seed + 1000 r + i) and
          the minibatch order, so a seeded run repeats (on the same machine and torch build).
          A run restored from a checkpoint samples on the next stream (:attr:`sampling_stream`):
          new env seeds, exploration draws (those of :meth:`compute_actions` too) and episode
          ids, not the first run's again (fixed policies with a generator of their own keep
          drawing from it).
        - **Envs**: each runner (the driver with ``num_env_runners=0``) steps one
          :class:`~marl_core.vector.VectorMultiAgentEnv` of ``num_envs_per_env_runner`` envs
          (``config.vector_mode``: ``"sync"`` or ``"async"``), one batched forward pass per policy
          per step, with ``config.sampling_torch_threads`` torch threads (default 1).
        - **Faults**: an env raising in ``reset``/``step`` is rebuilt by its vector
          (``on_error="rebuild"``) and its episode dropped (``num_env_errors``), the other envs
          going on; a dead runner actor is replaced and asked again within the same iteration
          (``num_runner_restarts``), up to ``max_runner_restarts`` times (then an
          :class:`~marl_core.errors.EnvRunnerError`, and the next iteration starts a new one);
          a runner whose env cannot be built there is an ``EnvRunnerError`` at once.

    Attributes:
        out_dir: the run's output folder when ``marl-train`` runs it (set before the first
            iteration, so callbacks can write next to the logs), None otherwise.
        restored_from: the checkpoint this algorithm was loaded from (None: built new).
        sampling_stream: 0 for a new run, one more at each restore from a checkpoint.
        callback_state: what callbacks keep across checkpoints, each under a key of its own
            (JSON values: dicts, lists, strings, numbers, booleans, None); saved with every
            checkpoint and restored with it.
    """

    def __init__(self, config: PPOConfig, *, runners: RunnerGroup | None = None, sampling_stream: int = 0,
                 check: bool = True) -> None:
        """Build from ``config``; ``runners``, when given, are this config's runners, already started
        (:meth:`PPOConfig.build` starts them before torch loads, so both happen at once).
        ``sampling_stream`` selects the samplers' random streams (see "Seeding" above). ``check``
        runs :meth:`PPOConfig.validate` (a checkpoint's saved config is taken as saved instead).
        """
        self.runners = runners
        self.sampling_stream = int(sampling_stream)
        self.sampler: Sampler | None = None
        try:
            if check:
                config = config.copy()
                config.validate()
            self._setup(config.copy())
        except BaseException:
            self.stop()
            raise

    def _setup(self, config: PPOConfig) -> None:
        self.config = config
        self.env_creator = config.env_creator()
        self.out_dir: Path | None = None
        self.restored_from: Path | None = None
        if config.torch_threads is not None:
            torch.set_num_threads(int(config.torch_threads))
        if config.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device is {config.device!r}, but torch finds no CUDA device on this machine; "
                              f"use device='cpu' (or 'auto', which takes CUDA when there is one)")
        self.device = torch.device(
            ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device)
        self.rng = np.random.default_rng(config.seed)
        # Exploring compute_actions calls draw here, not from the training stream.
        # compute_actions' draws: a restored run's stream too, not the first run's draws again.
        # Tagged apart from the samplers' [seed, worker_index, stream] (runner 1 would draw the same numbers).
        self.act_rng = np.random.default_rng(None if config.seed is None else [config.seed, _ACT_TAG, self.sampling_stream])
        self.iteration = 0
        self.env_steps_lifetime = 0
        self.num_env_errors_lifetime = 0
        self.last_env_error: str | None = None  # the first env error of the last iteration, if any
        self.num_runner_restarts_lifetime = 0
        self.evaluation_env_steps_lifetime = 0  # evaluate()'s, over every call (RLlib's evaluation lifetime count)
        self.time_total_s = 0.0
        self.callback_state: dict[str, Any] = {}
        self._build_mapping_fn = config.policy_mapping_fn
        if self.runners is None and config.num_env_runners > 0:  # first: actors start while models build
            self.runners = RunnerGroup.for_config(config, self.env_creator, stream=self.sampling_stream)
        self._build(config)

    def _build(self, config: PPOConfig) -> None:
        env = config.env if isinstance(config.env, str) else getattr(config.env, "__qualname__", repr(config.env))
        try:
            probe = self.env_creator(dict(config.env_config))
        except MultiAgentEnvError:
            raise
        except Exception as error:  # the user's env code: say which env, and with what config
            raise ConfigError(f"the env {env!r} raised {type(error).__name__} when built with env_config "
                              f"{dict(config.env_config)!r}: {error}{install_hint(error)}") from error
        missing = [name for name in _ENV_API if not hasattr(probe, name)]
        if missing:
            raise ConfigError(f"the env {env!r} built {a_type(probe)} without {missing}, expected a "
                              f"MultiAgentEnv (a foreign env goes through bridges.wrap(obj) first)")
        try:
            self._agents = list(probe.possible_agents)
            self._spaces = {a: (probe.get_observation_space(a), probe.get_action_space(a)) for a in self._agents}
        finally:
            probe.close()
        self.policies: dict[PolicyID, TorchPolicy | Callable[[Any], Any]] = {}
        self.learners: dict[PolicyID, Learner] = {}
        self._specs: dict[PolicyID, PolicySpec | None] = {}
        entries = config.policy_entries()
        for policy_id, entry in entries.items():
            self._install(policy_id, entry)
        learned = [pid for pid, p in self.policies.items() if isinstance(p, TorchPolicy)]
        to_train = learned if config.policies_to_train is None else config.policies_to_train
        self._set_to_train(to_train)
        if callable(config.policies_to_train):  # RLlib's form: this config (a copy) and checkpoints hold the list
            config.policies_to_train = list(self.to_train)
        self._returns: dict[PolicyID, deque] = {}
        self._lengths: dict[PolicyID, deque] = {}
        # Whole episodes (the sum over their agents; env steps) and single agents, for result["env_runners"].
        self._episode_returns: deque = deque(maxlen=100)
        self._episode_lengths: deque = deque(maxlen=100)
        self._agent_returns: dict[AgentID, deque] = {}
        self._unmapped: set[AgentID] = set()  # paid agents the mapping fn refuses, warned of once
        self._uncopyable: set[PolicyID] = set()  # fixed policies evaluate() cannot copy, warned of once
        self._state_version = 0
        if config.num_env_runners == 0:
            self.sampler = Sampler(self.env_creator, config.env_config, config.num_envs_per_env_runner,
                                   worker_index=0, seed=config.seed, stream=self.sampling_stream,
                                   max_env_errors_in_a_row=config.max_env_errors_in_a_row,
                                   vector_mode=config.vector_mode, vector_num_workers=config.vector_num_workers)
        self._sync_state()

    # Policies -----------------------------------------------------------------------------------

    def _spaces_for(self, policy_id: PolicyID, spec: PolicySpec | None, weights_from: str | None,
                    mapping_fn: Callable[..., PolicyID] | None = None) -> tuple[gym.Space, gym.Space, str]:
        """The policy's observation and action spaces, and where they came from (for messages)."""
        spaces = [spec.observation_space if spec else None, spec.action_space if spec else None]
        origins = ["its PolicySpec", "its PolicySpec"]

        def take(found: tuple[gym.Space, gym.Space], origin: str) -> None:
            for index in (0, 1):
                if spaces[index] is None:
                    spaces[index], origins[index] = found[index], origin

        source = self.policies.get(weights_from) if weights_from is not None else None
        if None in spaces and isinstance(source, TorchPolicy):
            take((source.observation_space, source.action_space), f"policy {weights_from!r}")
        if None in spaces:
            for agent_id in self._agents:
                if map_agent(mapping_fn or self.config.policy_mapping_fn, agent_id, Episode(-1, 0, 0)) == policy_id:
                    take(self._spaces[agent_id], f"agent {agent_id!r}, which maps to it")
                    break
        if None in spaces:
            distinct = {(repr(o), repr(a)) for o, a in self._spaces.values()}
            if len(distinct) != 1:
                raise SpaceError(
                    f"cannot infer the spaces of policy {policy_id!r}: no agent maps to it and the agents' "
                    f"spaces differ; pass PolicySpec(observation_space=..., action_space=...)")
            take(next(iter(self._spaces.values())), "every agent (they share them)")
        origin = (f"its spaces from {origins[0]}" if origins[0] == origins[1]
                  else f"its observation space from {origins[0]}; its action space from {origins[1]}")
        return spaces[0], spaces[1], origin

    def _install(self, policy_id: PolicyID, entry: Any, weights_from: str | None = None,
                 mapping_fn: Callable[..., PolicyID] | None = None) -> None:
        entry = policy_entry(policy_id, entry)
        if entry is not None and not isinstance(entry, PolicySpec):  # a fixed policy
            self.policies[policy_id] = entry
            self._specs[policy_id] = None
            return
        obs_space, act_space, origin = self._spaces_for(policy_id, entry, weights_from, mapping_fn)
        self.config.for_policy(entry, policy_id)  # a restored config's model keys stay as saved
        if self.config.seed is not None:
            torch.manual_seed(self.config.seed + zlib.crc32(policy_id.encode()))
        try:
            policy = TorchPolicy(obs_space, act_space, self.config.model_for(entry), self.device,
                                 normalize_actions=self.config.normalize_actions)
        except SpaceError as error:  # name the policy, and where its spaces came from
            raise SpaceError(f"policy {policy_id!r} ({origin}): {error}") from None
        policy.module.eval()
        if weights_from is not None:
            source = self.policies.get(weights_from)
            if not isinstance(source, TorchPolicy):
                raise ConfigError(f"weights_from={weights_from!r} is not a learned policy; learned: "
                                  f"{sorted(p for p, v in self.policies.items() if isinstance(v, TorchPolicy))}")
            policy.set_weights(source.get_weights())
        self.policies[policy_id] = policy
        self._specs[policy_id] = entry

    def _check_to_train(self, to_train: Any, policies: Mapping[PolicyID, Any] | None = None) -> list[PolicyID]:
        """``to_train`` as a list, checked against ``policies`` (default: the algorithm's)."""
        policies = self.policies if policies is None else policies
        if callable(to_train):  # RLlib's fn(policy_id, batch) -> bool
            to_train = asked_to_train(to_train, [p for p, v in policies.items() if isinstance(v, TorchPolicy)])
        if isinstance(to_train, (str, bytes, Mapping)) or not isinstance(to_train, Iterable):
            raise ConfigError(f"policies_to_train must be a list of policy ids, received {to_train!r}")
        to_train = list(to_train)  # a set or a dict view too
        if not all(isinstance(p, str) for p in to_train):
            raise ConfigError(f"policies_to_train must be a list of policy ids, received {to_train!r}")
        for policy_id in to_train:
            if not isinstance(policies.get(policy_id), TorchPolicy):
                raise ConfigError(f"policies_to_train names {policy_id!r}, which is not a learned policy; "
                                  f"learned policies: {sorted(p for p, v in policies.items() if isinstance(v, TorchPolicy))}")
        return to_train

    def _set_to_train(self, to_train: list[PolicyID]) -> None:
        self.to_train = self._check_to_train(to_train)
        for policy_id in self.to_train:
            if policy_id not in self.learners:
                policy = self.policies[policy_id]
                self.learners[policy_id] = Learner(policy, self.config.for_policy(self._specs[policy_id]), policy_id)
        for policy_id in list(self.learners):
            if policy_id not in self.to_train:
                del self.learners[policy_id]

    def add_policy(self, policy_id: PolicyID, policy: Any = None, *, weights_from: str | None = None,
                   policy_mapping_fn: Callable[..., PolicyID] | None = None,
                   policies_to_train: list[PolicyID] | Callable[..., bool] | None = None) -> None:
        """Add a learned (None or PolicySpec) or fixed (callable) policy during training.

        ``add_policy("main_v3", weights_from="main")`` adds a frozen copy of ``"main"`` (it is not
        trained unless ``policies_to_train`` names it). The change reaches the runners before the
        next sampling.
        """
        if not isinstance(policy_id, str):
            raise ConfigError(f"policy ids are strings, received {policy_id!r}")
        if policy_id in self.policies:
            raise ConfigError(f"policy {policy_id!r} exists already; policies: {sorted(self.policies)}")
        policy = policy_entry(policy_id, policy)
        if policy is None or isinstance(policy, PolicySpec):  # its own settings (a restored config's stay as saved)
            self.config.check_policy(policy_id, policy, model_keys=policy.model if policy is not None else ())
        elif weights_from is not None:  # a fixed policy has no weights to take: it would be ignored
            raise ConfigError(f"weights_from={weights_from!r} is for learned policies (None or a PolicySpec); "
                              f"policy {policy_id!r} is {a_type(policy)}")
        mapping_fn = None if policy_mapping_fn is None else checked_mapping_fn(policy_mapping_fn)
        self._install(policy_id, policy, weights_from, mapping_fn)  # the last change that can fail but this one:
        try:
            to_train = None if policies_to_train is None else self._check_to_train(policies_to_train)
        except ConfigError:
            del self.policies[policy_id], self._specs[policy_id]  # a refused call changes nothing
            raise
        self.config.policies = {**self.config.policy_entries(), policy_id: policy}
        if mapping_fn is not None:
            self.config.policy_mapping_fn = mapping_fn
        if to_train is not None:
            self._set_to_train(to_train)
            self.config.policies_to_train = list(to_train)  # a checkpoint's config names what exists
        self._sync_state()

    def remove_policy(self, policy_id: PolicyID, *, policy_mapping_fn: Callable[..., PolicyID] | None = None,
                      policies_to_train: list[PolicyID] | Callable[..., bool] | None = None) -> None:
        """Remove a policy; agents of ongoing episodes mapped to it are mapped again."""
        if policy_id not in self.policies:
            raise ConfigError(f"no policy {policy_id!r} to remove; policies: {sorted(self.policies)}")
        mapping_fn = None if policy_mapping_fn is None else checked_mapping_fn(policy_mapping_fn)
        kept = {p: v for p, v in self.policies.items() if p != policy_id}
        asked = kept if callable(policies_to_train) else self.policies  # a callable is asked of the kept ones
        to_train = self.to_train if policies_to_train is None else self._check_to_train(policies_to_train, asked)
        to_train = self._check_to_train([p for p in to_train if p != policy_id], kept)  # checked before any change
        del self.policies[policy_id]
        self._specs.pop(policy_id, None)
        self._returns.pop(policy_id, None)  # a policy added later under this id starts its own statistics
        self._lengths.pop(policy_id, None)
        self.config.policies = {k: v for k, v in self.config.policy_entries().items() if k != policy_id}
        if policies_to_train is not None:  # a checkpoint's config names what exists
            self.config.policies_to_train = list(to_train)
        elif self.config.policies_to_train is not None:
            self.config.policies_to_train = [p for p in self.config.policies_to_train if p != policy_id]
        if mapping_fn is not None:
            self.config.policy_mapping_fn = mapping_fn
        self._set_to_train(to_train)
        self._sync_state()

    def set_policy_mapping_fn(self, policy_mapping_fn: Callable[..., PolicyID] | str) -> None:
        """Replace the mapping fn (a function, or its ``"module:name"`` import path); agents of
        new episodes use it.

        Raises:
            ConfigError: ``policy_mapping_fn`` is not a function, or a path that imports one.
        """
        self.config.policy_mapping_fn = checked_mapping_fn(policy_mapping_fn)
        self._sync_state()

    def _runner_state(self) -> tuple[dict, Callable, set]:
        policies = {}
        for policy_id, policy in self.policies.items():
            if isinstance(policy, TorchPolicy):
                params = self.config.for_policy(self._specs[policy_id])
                policies[policy_id] = LearnedSpec(policy.observation_space, policy.action_space,
                                                  self.config.model_for(self._specs[policy_id]),
                                                  params["gamma"], params["lambda_"], self.config.normalize_actions)
            else:
                policies[policy_id] = policy
        return policies, self.config.policy_mapping_fn, set(self.to_train)

    def _sync_state(self) -> None:
        self._state_version += 1
        self._state_blob: bytes | None = None
        if self.sampler is not None:
            shared = {p: v for p, v in self.policies.items() if isinstance(v, TorchPolicy) and v.device.type == "cpu"}
            self.sampler.set_policies(*self._runner_state(), shared=shared)

    # Weights ------------------------------------------------------------------------------------

    def get_weights(self, policy_ids: list[PolicyID] | None = None) -> dict[PolicyID, dict[str, np.ndarray]]:
        """State dicts of learned policies as numpy arrays (all when ``policy_ids`` is None)."""
        ids = [p for p in self.policies if isinstance(self.policies[p], TorchPolicy)] if policy_ids is None else policy_ids
        out = {}
        for policy_id in ids:
            policy = self.policies.get(policy_id)
            if not isinstance(policy, TorchPolicy):
                raise ConfigError(f"{policy_id!r} is not a learned policy; policies: {sorted(self.policies)}")
            out[policy_id] = policy.get_weights()
        return out

    def set_weights(self, weights: Mapping[PolicyID, Mapping[str, Any]]) -> None:
        """Load state dicts from :meth:`get_weights` into the named policies."""
        for policy_id, state in weights.items():
            policy = self.policies.get(policy_id)
            if not isinstance(policy, TorchPolicy):
                raise ConfigError(f"{policy_id!r} is not a learned policy; policies: {sorted(self.policies)}")
            policy.set_weights(dict(state))

    # Training -----------------------------------------------------------------------------------

    def _steps_per_runner(self) -> int:
        """Env steps each runner samples in an iteration: its share of ``train_batch_size``, in
        whole fragments (``rollout_fragment_length`` steps of each of its envs) when that is set."""
        config = self.config
        share = math.ceil(config.train_batch_size / max(1, config.num_env_runners))
        if config.rollout_fragment_length == "auto":
            return max(config.num_envs_per_env_runner, share)
        fragment = int(config.rollout_fragment_length) * config.num_envs_per_env_runner
        return max(1, math.ceil(share / fragment)) * fragment

    def train(self) -> dict[str, Any]:
        """Run one iteration and return its metrics.

        Top-level episode metrics count whole episodes (``num_episodes``). Those under
        ``result["policies"][policy_id]`` count agent-episodes, an agent's part of an episode, as
        RLlib's per-module metrics do: a policy shared by two agents of one episode counts two,
        ``episode_return_*`` are single agents' returns (over the last 100 agent-episodes) and
        ``episode_len_mean`` is the number of actions the agent took (an agent paid but never
        asked to act has an agent-episode of length 0: its return counts, as ``rollout`` counts it,
        unless the mapping fn refuses its id). Every ``evaluation_interval`` iterations,
        ``result["evaluation"]`` holds what :meth:`evaluate` returns (an error it raises comes
        after the iteration's update, which stays).
        """
        if self.sampler is None and self.runners is None:
            raise EnvRunnerError("train() after stop(): the env runners and their envs are closed; build the "
                                 "trainer again (config.build(), or PPO.from_checkpoint() of a saved checkpoint)")
        start = time.perf_counter()
        steps = self._steps_per_runner()
        if self.sampler is not None:
            self.sampler.set_weights({p: v.get_weights() for p, v in self.policies.items()
                                      if isinstance(v, TorchPolicy) and v.device.type != "cpu"})
            learner_threads = torch.get_num_threads()
            torch.set_num_threads(int(self.config.sampling_torch_threads))
            try:
                samples = [self.sampler.sample(steps)]
            finally:
                torch.set_num_threads(learner_threads)
            restarts = 0
        else:
            import cloudpickle

            if self._state_blob is None:
                self._state_blob = cloudpickle.dumps(self._runner_state())
            before = self.runners.num_restarts
            weights = {p: v.get_weights() for p, v in self.policies.items() if isinstance(v, TorchPolicy)}
            try:
                samples = self.runners.sample(self._state_version, self._state_blob, weights, steps)
            finally:  # the runners replaced in an iteration that fails count too
                restarts = self.runners.num_restarts - before
                self.num_runner_restarts_lifetime += restarts
        # What went wrong while sampling counts whether or not the update below succeeds.
        env_errors = sum(s["num_env_errors"] for s in samples)
        self.num_env_errors_lifetime += env_errors
        self.last_env_error = next((s["first_env_error"] for s in samples if s.get("first_env_error")), None)
        sample_done = time.perf_counter()
        learner_metrics = {}
        # Every policy's update of an iteration stands or falls together: a TrainingError in one, or
        # a second Ctrl-C while they run, leaves all weights, optimizer states and the minibatch
        # generator as they were, so a checkpoint saved then matches its iteration count (a few MB
        # copied per iteration).
        before_update = {policy_id: copy.deepcopy(learner.state_dict()) for policy_id, learner in self.learners.items()}
        rng_before = copy.deepcopy(self.rng.bit_generator.state)
        try:
            for policy_id, learner in self.learners.items():
                parts = [s["batches"][policy_id] for s in samples if policy_id in s["batches"]]
                if parts:
                    learner_metrics[policy_id] = learner.update(
                        _merge(parts), self.rng, self.config.normalize_advantages,
                        env_steps=self.env_steps_lifetime + sum(s["env_steps"] for s in samples))
        except BaseException:  # TrainingError, KeyboardInterrupt, ...
            for policy_id, state in before_update.items():
                self.learners[policy_id].load_state_dict(state)
                self.learners[policy_id].policy.module.eval()
            self.rng.bit_generator.state = rng_before
            raise
        learn_done = time.perf_counter()
        self.iteration += 1
        env_steps = sum(s["env_steps"] for s in samples)
        self.env_steps_lifetime += env_steps
        elapsed = learn_done - start
        self.time_total_s += elapsed
        result = {
            "training_iteration": self.iteration,
            "num_env_steps_sampled": env_steps,
            "num_env_steps_sampled_lifetime": self.env_steps_lifetime,
            "num_agent_steps_sampled": sum(s["agent_steps"] for s in samples),
            "env_steps_per_s": env_steps / elapsed if elapsed > 0 else float("nan"),
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            "sample_time_s": sample_done - start,
            "learn_time_s": learn_done - sample_done,
            "num_env_errors": env_errors,
            "num_env_errors_lifetime": self.num_env_errors_lifetime,
            "num_runner_restarts": restarts,
            "num_runner_restarts_lifetime": self.num_runner_restarts_lifetime,
            "num_episodes": len({e["episode_id"] for s in samples for e in s["episodes"]}),
            "policies": self._policy_metrics(samples, learner_metrics),
        }
        result["env_runners"] = self._env_runner_metrics(samples, result)
        interval = self.config.evaluation_interval
        if interval is not None and self.iteration % interval == 0:
            result["evaluation"] = self.evaluate()  # after the update: it evaluates what this iteration learned
        return result

    def _policy_metrics(self, samples: list[dict], learner_metrics: dict[PolicyID, dict]) -> dict[PolicyID, dict]:
        episodes: dict[PolicyID, list[dict]] = {}
        for sample in samples:
            for episode in sample["episodes"]:
                episodes.setdefault(episode["policy_id"], []).append(episode)
        out = {}
        for policy_id in self.policies:
            returns = self._returns.setdefault(policy_id, deque(maxlen=100))
            lengths = self._lengths.setdefault(policy_id, deque(maxlen=100))
            done = episodes.get(policy_id, [])
            returns.extend(e["return"] for e in done)
            lengths.extend(e["length"] for e in done)
            metrics = {**episode_stats(returns, lengths), "num_episodes": len(done)}
            metrics.update(learner_metrics.get(policy_id, {}))
            out[policy_id] = metrics
        return out

    def _env_runner_metrics(self, samples: list[dict], result: dict[str, Any]) -> dict[str, Any]:
        """RLlib's ``result["env_runners"]`` over the last 100 whole episodes (their return is the
        sum over their agents, their length in env steps) and each agent's last 100."""
        episodes: dict[Any, dict[str, Any]] = {}
        for sample in samples:
            for record in sample["episodes"]:
                episode = episodes.setdefault(record["episode_id"], {"return": 0.0, "env_steps": record["env_steps"]})
                episode["return"] += record["return"]
                self._agent_returns.setdefault(record["agent_id"], deque(maxlen=100)).append(record["return"])
        self._episode_returns.extend(episode["return"] for episode in episodes.values())
        self._episode_lengths.extend(episode["env_steps"] for episode in episodes.values())
        return rllib_view(episode_stats(self._episode_returns, self._episode_lengths), len(episodes),
                          {agent_id: float(np.mean(window)) for agent_id, window in self._agent_returns.items()},
                          result["policies"], result["num_env_steps_sampled"], result["num_env_steps_sampled_lifetime"])

    # Inference ----------------------------------------------------------------------------------

    def compute_actions(self, obs_dict: Mapping[str, Any], policy_id: PolicyID | None = None,
                        explore: bool = False) -> dict[str, Any]:
        """Actions for every agent in ``obs_dict`` (mapped by ``policy_id`` or the mapping fn)."""
        episode = Episode(-1, 0, 0)
        groups: dict[PolicyID, list[str]] = {}
        for agent_id in obs_dict:
            pid = policy_id if policy_id is not None else map_agent(self.config.policy_mapping_fn, agent_id, episode)
            if pid not in self.policies:
                raise ConfigError(f"agent {agent_id!r} maps to {pid!r}, which is not a policy; "
                                  f"policies: {sorted(self.policies)}")
            groups.setdefault(pid, []).append(agent_id)
        actions = {}
        for pid, agents in groups.items():
            policy = self.policies[pid]
            if not isinstance(policy, TorchPolicy):
                actions.update({a: policy(obs_dict[a]) for a in agents})
                continue
            try:
                rows, _, _ = policy.act(stack_obs(policy.observation_space, [obs_dict[a] for a in agents]),
                                        explore=explore, rng=self.act_rng)
            except EnvContractError as error:
                stuck = name_stuck_rows(error, agents, "agents", pid)
                if stuck is None:
                    raise
                raise stuck from error
            except Exception as error:  # a torch or numpy error over an observation the model cannot take
                _refuse_unfit(error, pid, policy.observation_space, [(f"agent {a!r}", obs_dict[a]) for a in agents])
                raise
            actions.update(zip(agents, policy.layout.to_env(rows), strict=True))
        return actions

    def compute_single_action(self, observation: Any, *, policy_id: PolicyID = DEFAULT_POLICY,
                              explore: bool = False) -> Any:
        """The action policy ``policy_id`` takes for one observation, as RLlib's method of this
        name gives it (greedy unless ``explore``; RLlib's default follows its config's
        ``explore``, True unless set). RLlib's RNN ``state`` and other arguments are not taken.

        Raises:
            ConfigError: there is no policy ``policy_id``.
            SpaceError: the policy cannot take ``observation``.
            EnvContractError: the observation's action mask allows no action.
        """
        return self.get_policy_callable(policy_id, explore)(observation)

    def get_policy_callable(self, policy_id: PolicyID, explore: bool = False) -> Callable[[Any], Any]:
        """``fn(observation) -> action`` acting with one policy (for evaluation and play)."""
        return self._policy_callable(policy_id, explore, self.act_rng)

    def _policy_callable(self, policy_id: PolicyID, explore: bool, rng: np.random.Generator) -> Callable[[Any], Any]:
        policy = self.policies.get(policy_id)
        if policy is None:
            raise ConfigError(f"no policy {policy_id!r}; policies: {sorted(self.policies)}")
        if not isinstance(policy, TorchPolicy):
            return policy

        def act(observation: Any) -> Any:
            try:
                rows, _, _ = policy.act(stack_obs(policy.observation_space, [observation]), explore=explore, rng=rng)
            except EnvContractError as error:
                if hasattr(error, "rows"):  # a mask that allows nothing: a final observation, say
                    raise EnvContractError(f"policy {policy_id!r} was asked to act on an observation whose action "
                                           "mask allows no action (a final observation has none)") from None
                raise
            except Exception as error:  # a torch or numpy error over an observation the model cannot take
                _refuse_unfit(error, policy_id, policy.observation_space, [("the observation", observation)])
                raise
            return policy.layout.to_env(rows)[0]

        return act

    def evaluate(self) -> dict[str, Any]:
        """Play evaluation episodes in the driver and return what they earned; nothing is trained.

        Plays ``evaluation_duration`` episodes (``evaluation_duration_unit="timesteps"``: whole
        episodes until at least that many env steps) of the config's env and ``env_config``, each
        agent acting with the policy the mapping fn gives it per episode (evaluation episodes
        have negative ``episode.id_``: -2, -3, ...): learned policies take their most likely
        action unless ``evaluation_explore``. Fixed policies act through copies made for each
        call, so random numbers they draw themselves leave training's draws alone (and may
        differ from call to call). With a ``seed``, every call plays the same seeded episodes
        (and learned policies draw the same exploring actions), so figures from different
        iterations compare the policies, not the luck of the draw. Agents are counted as
        ``train()`` counts them: those that acted, and those paid that the mapping fn maps (one it
        refuses is left out of every figure, an episode's return included). An env that raises
        is rebuilt and its episode dropped and counted, as in training; ``max_env_errors_in_a_row``
        failures in a row stop the evaluation. A fixed policy that raises, or chooses an action
        outside the agent's space or mask, stops it at once (its own error, or a
        :class:`ConfigError`), as in training. ``train()`` calls this every ``evaluation_interval``
        iterations.

        Returns:
            ``num_episodes``; ``num_env_steps``; ``episode_return_mean``, ``_min`` and ``_max`` (an
            episode's return is the sum over its agents, as RLlib's) and ``episode_len_mean`` (env
            steps); ``agent_episode_returns_mean`` by agent id (over the episodes where it acted
            or was paid); ``policies``: per policy, over its agent-episodes, the keys ``train()``
            gives (``episode_return_mean``, ``_min``, ``_max``,
            ``episode_len_mean`` in the agent's actions, ``num_episodes``); ``num_env_errors``;
            ``explore``; ``time_s``.

        Raises:
            EnvRunnerError: after :meth:`stop`.
            EnvContractError: the env failed ``max_env_errors_in_a_row`` times in a row.
            ConfigError: the mapping fn fails for an agent that acts, or names no policy; a fixed
                policy's action is outside its agent's space or mask.
        """
        if self.sampler is None and self.runners is None:
            raise EnvRunnerError("evaluate() after stop(): build the trainer again (config.build(), or "
                                 "PPO.from_checkpoint() of a saved checkpoint)")
        config, start = self.config, time.perf_counter()
        explore = bool(config.evaluation_explore)
        rng = np.random.default_rng(None if config.seed is None else [config.seed, _EVALUATION_TAG])
        callables = {pid: self._private_copy(pid, policy) for pid, policy in self.policies.items()
                     if not isinstance(policy, TorchPolicy)}
        episodes: list[Episode] = []
        env, attempt, errors, in_a_row, steps = None, 0, 0, 0, 0
        try:
            while (len(episodes) if config.evaluation_duration_unit == "episodes" else steps) < config.evaluation_duration:
                episode = Episode(-2 - attempt, 0, 0)
                seed = None if config.seed is None else int(
                    np.random.SeedSequence([config.seed, _EVALUATION_TAG, attempt]).generate_state(1)[0])
                attempt += 1
                try:
                    env = env or self.env_creator(dict(config.env_config))
                    self._evaluation_episode(env, episode, seed, explore, rng, callables)
                except _PolicyFailure as failure:  # a fixed policy's own error: no env will do better
                    raise failure.error from None
                except ConfigError:  # the mapping fn's, or a fixed policy's action
                    raise
                except Exception as error:
                    errors, in_a_row = errors + 1, in_a_row + 1
                    where = f"evaluation episode {episode.id_} (seed {seed})"
                    with contextlib.suppress(Exception):
                        env.close()  # type: ignore[union-attr]
                    env = None
                    if in_a_row >= config.max_env_errors_in_a_row:
                        raise EnvContractError(f"the env failed {in_a_row} times in a row while evaluating; the last, "
                                               f"in {where}: {type(error).__name__}: {error}") from error
                    logger.warning("the env raised %s in %s: %s; the episode is dropped and the env rebuilt",
                                   type(error).__name__, where, error)
                    continue
                in_a_row = 0
                episodes.append(episode)
                steps += episode.env_steps
        finally:
            if env is not None:
                env.close()
        return self._evaluation_metrics(episodes, errors, explore, time.perf_counter() - start)

    def _evaluation_episode(self, env: Any, episode: Episode, seed: int | None, explore: bool,
                            rng: np.random.Generator, callables: dict[PolicyID, Callable[[Any], Any]]) -> None:
        """Play one episode into ``episode``: its returns (paid agents), actions per agent, env steps
        and each counted agent's policy (those that acted, and those paid that the mapping fn maps)."""
        from marl_core.rollout import play

        def act(agent_id: AgentID, observation: Any) -> Any:
            policy_id = episode.agent_to_policy.get(agent_id)
            if policy_id is None:
                policy_id = episode.agent_to_policy[agent_id] = self._mapped(agent_id, episode)
            if policy_id not in callables:
                callables[policy_id] = self._policy_callable(policy_id, explore, rng)
            episode.lengths[agent_id] = episode.lengths.get(agent_id, 0) + 1
            if isinstance(self.policies[policy_id], TorchPolicy):
                return callables[policy_id](observation)
            try:
                action = callables[policy_id](observation)
            except Exception as error:
                raise _PolicyFailure(error) from error
            check_fixed_action(policy_id, agent_id, env.get_action_space(agent_id), observation, action)
            return action

        for transition in play(env, act, seed=seed):
            for agent_id, reward in transition.rewards.items():
                if agent_id != ALL:
                    episode.returns[agent_id] = episode.returns.get(agent_id, 0.0) + float(reward)
            episode.env_steps = transition.index
        for agent_id in list(episode.returns):  # paid, never asked to act: counted as train() counts it
            if agent_id not in episode.agent_to_policy:
                policy_id = self._mapped(agent_id, episode, acts=False)
                if policy_id is not None:
                    episode.agent_to_policy[agent_id] = policy_id
                else:  # the mapping fn refuses it: left out of every figure, as train() leaves it out
                    del episode.returns[agent_id]

    def _evaluation_metrics(self, episodes: list[Episode], errors: int, explore: bool, seconds: float) -> dict[str, Any]:
        by_agent: dict[AgentID, list[float]] = {}
        by_policy: dict[PolicyID, tuple[list[float], list[int]]] = {p: ([], []) for p in self.policies}
        for episode in episodes:
            for agent_id, policy_id in episode.agent_to_policy.items():
                total = episode.returns.get(agent_id, 0.0)
                by_agent.setdefault(agent_id, []).append(total)
                returns, lengths = by_policy[policy_id]
                returns.append(total)
                lengths.append(episode.lengths.get(agent_id, 0))
        steps = sum(episode.env_steps for episode in episodes)
        self.evaluation_env_steps_lifetime += steps
        whole = episode_stats([sum(episode.returns.values()) for episode in episodes],
                              [episode.env_steps for episode in episodes])
        agents = {agent_id: float(np.mean(found)) for agent_id, found in by_agent.items()}
        policies = {policy_id: {**episode_stats(returns, lengths), "num_episodes": len(returns)}
                    for policy_id, (returns, lengths) in by_policy.items()}
        return {
            "num_episodes": len(episodes),
            "num_env_steps": steps,
            **whole,
            "agent_episode_returns_mean": agents,
            "policies": policies,
            "num_env_errors": errors,
            "explore": explore,
            "time_s": seconds,
            "env_runners": rllib_view(whole, len(episodes), agents, policies, steps, self.evaluation_env_steps_lifetime),
        }

    def _private_copy(self, policy_id: PolicyID, policy: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """A copy of a fixed policy with its own state (its random generator, say), as env runners
        get one (a module-level function is pickled by reference: its module's globals stay shared);
        the policy itself, with a warning once, when it cannot be pickled."""
        import cloudpickle

        try:
            return cloudpickle.loads(cloudpickle.dumps(policy))
        except Exception as error:
            if policy_id not in self._uncopyable:
                self._uncopyable.add(policy_id)
                logger.warning("fixed policy %r cannot be copied (%s: %s): evaluate() calls it itself, so random "
                               "numbers it draws there are not drawn in training", policy_id, type(error).__name__,
                               error)
            return policy

    def _mapped(self, agent_id: AgentID, episode: Episode, acts: bool = True) -> PolicyID | None:
        """The policy the mapping fn gives ``agent_id`` in ``episode``, which must be one of ours;
        ``acts=False`` for an agent only paid: None when the mapping fn raises for it (as training
        leaves such an agent out of the metrics)."""
        return mapped_policy(self.config.policy_mapping_fn, agent_id, episode, self.policies, acts=acts,
                             unmapped=self._unmapped, figures="the evaluation's figures")

    # Checkpoints and lifetime -------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint directory atomically (see :mod:`marl_core.ppo.checkpoint`): ``path``
        is new, empty or an earlier checkpoint, which it replaces; anything else raises
        :class:`~marl_core.errors.CheckpointError` naming what is there."""
        from marl_core.ppo.checkpoint import save_checkpoint

        return save_checkpoint(self, Path(path))

    @classmethod
    def from_checkpoint(cls, path: str | Path, **overrides: Any) -> PPO:
        """Build from a checkpoint and continue where it stopped; ``overrides`` replace config fields."""
        from marl_core.ppo.checkpoint import load_checkpoint

        return load_checkpoint(cls, Path(path), overrides)

    def stop(self) -> None:
        """Stop the runners (and Ray, if this algorithm started it) and close the envs."""
        if self.runners is not None:
            self.runners.stop()
            self.runners = None
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None

    def __repr__(self) -> str:
        if not hasattr(self, "policies"):  # a failed build
            return f"<{type(self).__name__}, not built>"
        env = self.config.env if isinstance(self.config.env, str) else getattr(
            self.config.env, "__qualname__", repr(self.config.env))
        return (f"{type(self).__name__}(env={env!r}, policies={list(self.policies)!r}, "
                f"training={list(getattr(self, 'to_train', []))!r}, iteration={self.iteration})")

    def __enter__(self) -> PPO:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class _PolicyFailure(Exception):
    """A fixed policy's own exception while evaluating (``error``): raised as it is, not taken for the env's."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def rllib_view(whole: Mapping[str, float], num_episodes: int, agents: Mapping[AgentID, float],
               policies: Mapping[PolicyID, Mapping[str, Any]], env_steps: int, lifetime: int) -> dict[str, Any]:
    """The episode figures under RLlib's ``env_runners`` names, for scripts written against its results."""
    return {
        **whole,
        "num_episodes": num_episodes,
        "agent_episode_returns_mean": dict(agents),
        "module_episode_returns_mean": {policy_id: metrics["episode_return_mean"] for policy_id, metrics in policies.items()},
        "num_env_steps_sampled": env_steps,
        "num_env_steps_sampled_lifetime": lifetime,
    }


def episode_stats(returns: Iterable[float], lengths: Iterable[int]) -> dict[str, float]:
    """``episode_return_mean``, ``_min``, ``_max`` and ``episode_len_mean`` (NaN when empty)."""
    returns, lengths = list(returns), list(lengths)
    nan = float("nan")
    return {
        "episode_return_mean": float(np.mean(returns)) if returns else nan,
        "episode_return_min": float(np.min(returns)) if returns else nan,
        "episode_return_max": float(np.max(returns)) if returns else nan,
        "episode_len_mean": float(np.mean(lengths)) if lengths else nan,
    }


def _refuse_unfit(error: Exception, policy_id: PolicyID, space: Any, observations: list[tuple[str, Any]]) -> None:
    """Raise a :class:`SpaceError` naming the ``(label, observation)`` pairs that policy
    ``policy_id`` cannot take, as the cause of ``error``; return when all fit (the error is not theirs)."""
    found = unfit_descriptions([(label, space, observation) for label, observation in observations])
    if found:
        raise SpaceError(f"observations that policy {policy_id!r} cannot take: {listed(found)}") from error
