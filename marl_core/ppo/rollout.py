"""Sampling: the one implementation used in the driver (``num_env_runners=0``) and in Ray actors.

A :class:`Sampler` steps ``num_envs`` envs together. At every step it groups the acting agents of
all envs by policy and runs one batched forward pass per policy. Each agent keeps a trajectory:
its rewards are credited to its most recent action and accumulate until its next action or the
end of the episode, so in turn-based games the reward that arrives when the opponent wins is
credited to the loser's last move. GAE runs per agent trajectory when it ends (no bootstrap on
termination, the value of the final observation on truncation). When the batch is full, every
open trajectory ships all but its last action, bootstrapped with that action's value, and keeps
the last action for the next batch, so no reward is lost at batch boundaries.

An env that raises is rebuilt, its episode dropped and counted (``num_env_errors``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from marl_core.env import ALL, AgentID
from marl_core.errors import ConfigError, EnvContractError
from marl_core.ppo.gae import compute_gae
from marl_core.ppo.model import TorchPolicy, index_obs, stack_obs

logger = logging.getLogger(__name__)

PolicyID = str


@dataclass(frozen=True)
class LearnedSpec:
    """What a runner needs to build a learned policy."""

    observation_space: Any
    action_space: Any
    model_config: dict[str, Any]
    gamma: float
    lambda_: float


@dataclass
class Episode:
    """One episode of one env, as seen by ``policy_mapping_fn(agent_id, episode)``.

    Attributes:
        id_: unique per episode (over all runners).
        env_index: index of the env inside its runner.
        worker_index: the runner (0: the driver).
    """

    id_: int
    env_index: int
    worker_index: int
    agent_to_policy: dict[AgentID, PolicyID] = field(default_factory=dict)
    returns: dict[AgentID, float] = field(default_factory=dict)
    lengths: dict[AgentID, int] = field(default_factory=dict)
    env_steps: int = 0


class _Trajectory:
    __slots__ = ("actions", "logp", "obs", "rewards", "values")

    def __init__(self) -> None:
        self.obs: list[Any] = []
        self.actions: list[np.ndarray] = []
        self.logp: list[float] = []
        self.values: list[float] = []
        self.rewards: list[float] = []


class Sampler:
    """Steps ``num_envs`` envs with the current policies and returns per-policy train batches."""

    def __init__(self, env_creator: Callable[[dict], Any], env_config: Mapping[str, Any], num_envs: int,
                 *, worker_index: int = 0, seed: int | None = 0, max_env_errors_in_a_row: int = 10) -> None:
        self.env_creator = env_creator
        self.env_config = dict(env_config)
        self.worker_index = worker_index
        self.seed = seed
        self.max_env_errors_in_a_row = max_env_errors_in_a_row
        self.generator = torch.Generator()
        self.generator.manual_seed((0 if seed is None else seed) * 7919 + worker_index)
        self.policies: dict[PolicyID, TorchPolicy | Callable[[Any], Any]] = {}
        self.specs: dict[PolicyID, LearnedSpec] = {}
        self.to_train: set[PolicyID] = set()
        self.mapping_fn: Callable[..., PolicyID] | None = None
        self._episode_counter = 0
        self.num_env_errors = 0
        self.envs = [env_creator(dict(self.env_config)) for _ in range(num_envs)]
        self.obs: list[dict[AgentID, Any]] = [{} for _ in range(num_envs)]
        self.ending: list[set[AgentID]] = [set() for _ in range(num_envs)]
        self.episodes: list[Episode] = [None] * num_envs  # type: ignore[list-item]
        self.trajectories: list[dict[AgentID, _Trajectory]] = [{} for _ in range(num_envs)]
        self._failures_in_a_row = [0] * num_envs
        self._started = False

    # State from the driver ----------------------------------------------------------------------

    def set_policies(self, policies: Mapping[PolicyID, Any], mapping_fn: Callable[..., PolicyID],
                     to_train: set[PolicyID], shared: Mapping[PolicyID, TorchPolicy] | None = None) -> None:
        """Install policies (LearnedSpec or fixed callables), the mapping fn and the trained set.

        Learned policies that keep their id keep their module; ``shared`` gives modules to use as
        they are (the driver's own, when sampling in the driver). Ongoing episodes whose agents map
        to a removed policy are remapped and their trajectories dropped.
        """
        current = {}
        shared = shared or {}
        for policy_id, entry in policies.items():
            if isinstance(entry, LearnedSpec):
                old = self.policies.get(policy_id)
                if policy_id in shared:
                    current[policy_id] = shared[policy_id]
                    self.specs[policy_id] = entry
                elif isinstance(old, TorchPolicy) and self.specs.get(policy_id) == entry:
                    current[policy_id] = old
                else:
                    current[policy_id] = TorchPolicy(entry.observation_space, entry.action_space, entry.model_config)
                    self.specs[policy_id] = entry
            else:
                current[policy_id] = entry
        self.policies = current
        self.mapping_fn = mapping_fn
        self.to_train = set(to_train)
        for index, episode in enumerate(self.episodes):
            if episode is None:
                continue
            for agent_id, policy_id in list(episode.agent_to_policy.items()):
                if policy_id not in current:
                    del episode.agent_to_policy[agent_id]
                    self.trajectories[index].pop(agent_id, None)

    def set_weights(self, weights: Mapping[PolicyID, Mapping[str, Any]]) -> None:
        """Load learned weights (policy id -> state dict)."""
        for policy_id, state in weights.items():
            policy = self.policies.get(policy_id)
            if isinstance(policy, TorchPolicy):
                policy.set_weights(state)

    # Episodes -----------------------------------------------------------------------------------

    def _new_episode(self, index: int) -> None:
        self._episode_counter += 1
        self.episodes[index] = Episode((self.worker_index << 40) + self._episode_counter, index, self.worker_index)
        self.trajectories[index] = {}
        self.ending[index] = set()

    def _reset(self, index: int, seed: int | None) -> None:
        self._new_episode(index)
        obs, _ = self.envs[index].reset(seed=seed)
        self.obs[index] = obs

    def _start(self) -> None:
        for index in range(len(self.envs)):
            seed = None if self.seed is None else self.seed + 1000 * self.worker_index + index
            self._guarded(index, lambda i=index, s=seed: self._reset(i, s))
        self._started = True

    def _guarded(self, index: int, action: Callable[[], Any]) -> bool:
        """Run ``action``; on an env error rebuild env ``index`` and drop its episode.

        Returns False when the env failed (and was rebuilt). Raises after
        ``max_env_errors_in_a_row`` failures of one env without a successful step in between.
        """
        failed = False
        while True:
            try:
                action()
                if not failed:
                    self._failures_in_a_row[index] = 0
                return not failed
            except Exception as error:
                self.num_env_errors += 1
                self._failures_in_a_row[index] += 1
                failures = self._failures_in_a_row[index]
                failed = True
                logger.warning("env %d of runner %d raised %s: %s; rebuilding it and dropping its episode",
                               index, self.worker_index, type(error).__name__, error, exc_info=True)
                if failures >= self.max_env_errors_in_a_row:
                    raise EnvContractError(
                        f"env {index} of runner {self.worker_index} failed {failures} times in a row; last "
                        f"error: {type(error).__name__}: {error}") from error
                try:
                    self.envs[index].close()
                except Exception:
                    logger.debug("closing a failed env raised", exc_info=True)
                self.envs[index] = self.env_creator(dict(self.env_config))
                action = lambda i=index: self._reset(i, None)  # noqa: E731

    def policy_of(self, episode: Episode, agent_id: AgentID) -> PolicyID:
        """The policy of ``agent_id`` in ``episode`` (the mapping fn is asked once per episode)."""
        policy_id = episode.agent_to_policy.get(agent_id)
        if policy_id is None:
            policy_id = self.mapping_fn(agent_id, episode)
            if policy_id not in self.policies:
                raise ConfigError(f"policy_mapping_fn mapped agent {agent_id!r} to {policy_id!r}, which is not "
                                  f"a policy; policies: {sorted(self.policies)}")
            episode.agent_to_policy[agent_id] = policy_id
        return policy_id

    # Sampling -----------------------------------------------------------------------------------

    def sample(self, num_env_steps: int) -> dict[str, Any]:
        """Step the envs until ``num_env_steps`` env steps were taken; return batches and metrics."""
        start = time.perf_counter()
        if not self._started:
            self._start()
        out: dict[PolicyID, dict[str, list]] = {}
        finished_episodes: list[dict[str, Any]] = []
        errors_before = self.num_env_errors
        env_steps = agent_steps = 0
        while env_steps < num_env_steps:
            actions, count = self._act()
            agent_steps += count
            truncated: list[tuple[PolicyID, Any, _Trajectory]] = []
            for index, env_actions in enumerate(actions):
                if self._guarded(index, lambda i=index, a=env_actions, t=truncated: self._step(
                        i, a, out, t, finished_episodes)):
                    env_steps += 1
            self._bootstrap_truncated(truncated, out)
        for index in range(len(self.envs)):
            for agent_id, trajectory in self.trajectories[index].items():
                policy_id = self.episodes[index].agent_to_policy.get(agent_id)
                if policy_id is not None and len(trajectory.rewards) > 1:
                    self._ship(policy_id, trajectory, out, upto=len(trajectory.rewards) - 1,
                               last_value=trajectory.values[-1], terminated=False)
        batches = {pid: self._finish_batch(pid, parts) for pid, parts in out.items() if parts["rewards"]}
        return {
            "batches": batches,
            "episodes": finished_episodes,
            "env_steps": env_steps,
            "agent_steps": agent_steps,
            "num_env_errors": self.num_env_errors - errors_before,
            "sample_time_s": time.perf_counter() - start,
        }

    def _act(self) -> tuple[list[dict[AgentID, Any]], int]:
        groups: dict[PolicyID, tuple[list[tuple[int, AgentID]], list[Any]]] = {}
        for index, obs in enumerate(self.obs):
            episode, ending = self.episodes[index], self.ending[index]
            for agent_id, observation in obs.items():
                if agent_id in ending:
                    continue
                keys, values = groups.setdefault(self.policy_of(episode, agent_id), ([], []))
                keys.append((index, agent_id))
                values.append(observation)
        actions: list[dict[AgentID, Any]] = [{} for _ in self.envs]
        count = 0
        for policy_id, (keys, observations) in groups.items():
            policy = self.policies[policy_id]
            count += len(keys)
            if not isinstance(policy, TorchPolicy):
                for (index, agent_id), observation in zip(keys, observations, strict=True):
                    actions[index][agent_id] = policy(observation)
                    self.episodes[index].lengths[agent_id] = self.episodes[index].lengths.get(agent_id, 0) + 1
                continue
            batch = stack_obs(policy.observation_space, observations)
            rows, logps, values = policy.act(batch, explore=True, generator=self.generator)
            env_actions = policy.dist.to_env(rows)
            record = policy_id in self.to_train
            for row, (index, agent_id) in enumerate(keys):
                actions[index][agent_id] = env_actions[row]
                episode = self.episodes[index]
                episode.lengths[agent_id] = episode.lengths.get(agent_id, 0) + 1
                if record:
                    trajectory = self.trajectories[index].get(agent_id)
                    if trajectory is None:
                        trajectory = self.trajectories[index][agent_id] = _Trajectory()
                    trajectory.obs.append(index_obs(batch, row))
                    trajectory.actions.append(rows[row])
                    trajectory.logp.append(float(logps[row]))
                    trajectory.values.append(float(values[row]))
                    trajectory.rewards.append(0.0)
        return actions, count

    def _step(self, index: int, env_actions: dict[AgentID, Any], out: dict, truncated: list,
              finished: list) -> None:
        if not env_actions:
            raise EnvContractError(f"{type(self.envs[index]).__name__} asked no agent to act (observations for "
                                   f"{sorted(self.obs[index])}) without setting '__all__'")
        obs, rewards, terminateds, truncateds, _ = self.envs[index].step(env_actions)
        episode, trajectories = self.episodes[index], self.trajectories[index]
        episode.env_steps += 1
        for agent_id, reward in rewards.items():
            episode.returns[agent_id] = episode.returns.get(agent_id, 0.0) + float(reward)
            trajectory = trajectories.get(agent_id)
            if trajectory is not None and trajectory.rewards:
                trajectory.rewards[-1] += float(reward)
        all_terminated = bool(terminateds.get(ALL, False))
        all_done = all_terminated or bool(truncateds.get(ALL, False))
        ended = trajectories if all_done else [a for a in obs if terminateds.get(a) or truncateds.get(a)]
        for agent_id in list(ended):
            trajectory = trajectories.pop(agent_id, None)
            if trajectory is None or not trajectory.rewards:
                continue
            policy_id = episode.agent_to_policy[agent_id]
            if terminateds.get(agent_id, False) or (all_terminated and not truncateds.get(agent_id, False)):
                self._ship(policy_id, trajectory, out, len(trajectory.rewards), 0.0, terminated=True)
            elif agent_id in obs:
                truncated.append((policy_id, obs[agent_id], trajectory))
            else:
                self._ship(policy_id, trajectory, out, len(trajectory.rewards), trajectory.values[-1], False)
        if all_done:
            for agent_id, policy_id in episode.agent_to_policy.items():
                finished.append({"episode_id": episode.id_, "policy_id": policy_id, "agent_id": agent_id,
                                 "return": episode.returns.get(agent_id, 0.0),
                                 "length": episode.lengths.get(agent_id, 0), "env_steps": episode.env_steps})
            self._reset(index, None)
        else:
            self.obs[index] = obs
            self.ending[index] = {a for a in obs if terminateds.get(a) or truncateds.get(a)}

    def _bootstrap_truncated(self, truncated: list, out: dict) -> None:
        by_policy: dict[PolicyID, list] = {}
        for policy_id, observation, trajectory in truncated:
            by_policy.setdefault(policy_id, []).append((observation, trajectory))
        for policy_id, items in by_policy.items():
            policy = self.policies[policy_id]
            values = policy.value(stack_obs(policy.observation_space, [o for o, _ in items]))
            for value, (_, trajectory) in zip(values, items, strict=True):
                self._ship(policy_id, trajectory, out, len(trajectory.rewards), float(value), terminated=False)

    def _ship(self, policy_id: PolicyID, trajectory: _Trajectory, out: dict, upto: int, last_value: float,
              terminated: bool) -> None:
        """Compute GAE over the first ``upto`` actions, move them to ``out`` and drop them."""
        spec = self.specs[policy_id]
        rewards = np.asarray(trajectory.rewards[:upto], dtype=np.float32)
        values = np.asarray(trajectory.values[:upto], dtype=np.float32)
        advantages, returns = compute_gae(rewards, values, last_value, terminated, spec.gamma, spec.lambda_)
        parts = out.setdefault(policy_id, {"obs": [], "actions": [], "logp": [], "values": [],
                                           "advantages": [], "returns": [], "rewards": []})
        parts["obs"].extend(trajectory.obs[:upto])
        parts["actions"].extend(trajectory.actions[:upto])
        parts["logp"].extend(trajectory.logp[:upto])
        parts["values"].append(values)
        parts["rewards"].append(rewards)
        parts["advantages"].append(advantages)
        parts["returns"].append(returns)
        for name in _Trajectory.__slots__:
            del getattr(trajectory, name)[:upto]

    def _finish_batch(self, policy_id: PolicyID, parts: dict[str, list]) -> dict[str, Any]:
        space = self.specs[policy_id].observation_space
        return {
            "obs": stack_obs(space, parts["obs"]),
            "actions": np.asarray(parts["actions"], dtype=np.float32),
            "logp": np.asarray(parts["logp"], dtype=np.float32),
            "values": np.concatenate(parts["values"]),
            "rewards": np.concatenate(parts["rewards"]),
            "advantages": np.concatenate(parts["advantages"]),
            "returns": np.concatenate(parts["returns"]),
        }

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            try:
                env.close()
            except Exception:
                logger.debug("closing an env raised", exc_info=True)


class EnvRunner:
    """A Ray actor around a :class:`Sampler`; state from the driver arrives cloudpickled."""

    def __init__(self, env_creator_blob: bytes, env_config: dict, num_envs: int, worker_index: int,
                 seed: int | None, max_env_errors_in_a_row: int, log_level: str) -> None:
        import cloudpickle

        torch.set_num_threads(1)
        logging.basicConfig(level=log_level)
        self.sampler = Sampler(cloudpickle.loads(env_creator_blob), env_config, num_envs, worker_index=worker_index,
                               seed=seed, max_env_errors_in_a_row=max_env_errors_in_a_row)
        self.state_version = -1

    def set_state(self, version: int, blob: bytes) -> int:
        """Install ``(policies, mapping_fn, to_train)`` from the driver when newer than ours."""
        import cloudpickle

        if version != self.state_version:
            self.sampler.set_policies(*cloudpickle.loads(blob))
            self.state_version = version
        return version

    def sample(self, version: int, state_blob: bytes | None, weights: Mapping[PolicyID, Any],
               num_env_steps: int) -> dict[str, Any]:
        """Sync state and weights, then sample."""
        if state_blob is not None:
            self.set_state(version, state_blob)
        self.sampler.set_weights(weights)
        return self.sampler.sample(num_env_steps)

    def ping(self) -> bool:
        """Liveness check."""
        return True
