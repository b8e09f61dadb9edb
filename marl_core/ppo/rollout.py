"""Sampling: the one implementation used in the driver (``num_env_runners=0``) and in Ray actors.

A :class:`Sampler` steps a :class:`~marl_core.vector.VectorMultiAgentEnv` of ``num_envs`` envs
(``"sync"`` or ``"async"``). At every step it groups the acting agents of all envs by policy with
:func:`~marl_core.vector.gather`, runs one batched forward pass per policy and sends the actions
back with :func:`~marl_core.vector.scatter`. An env whose episode ends is reset by the vector in
the same step (``autoreset_mode="same_step"``), which starts a new episode for it. Each agent keeps a trajectory:
its rewards are credited to its most recent action and accumulate until its next action or the
end of the episode, so in turn-based games the reward that arrives when the opponent wins is
credited to the loser's last move, and an agent that ends early keeps being credited until the
episode ends. GAE runs per agent trajectory when the episode ends (no bootstrap on termination,
the value of the final observation on truncation); an agent that ends early ships all but its
last action at once. When the batch is full, every
open trajectory ships all but its last action, bootstrapped with that action's value, and keeps
the last action for the next batch, so no reward is lost at batch boundaries.

An env that raises is rebuilt by the vector (``on_error="rebuild"``) and counted
(``num_env_errors``); the other envs go on. A step that raises drops its episode; a reset that
raises after an episode ended keeps that episode, and the rebuilt env starts the next one.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl_core.env import ALL, AgentID, scalar_reward
from marl_core.errors import ConfigError, EnvContractError, InvalidActionError, SpaceError
from marl_core.ppo.actions import name_stuck_rows
from marl_core.ppo.batching import as_dtype, index_obs, listed, stack_obs, unfit_descriptions
from marl_core.ppo.config import map_agent
from marl_core.ppo.gae import compute_gae
from marl_core.ppo.numpy_policy import NumpyPolicy, runs_in_numpy
from marl_core.spaces import (
    MASK_KEY,
    action_masks_of,
    check_action,
    same_layout,
    snapshot,
    surely_valid_action,
)
from marl_core.vector import VectorMultiAgentEnv, gather, scatter

logger = logging.getLogger(__name__)

# How far a restored run's env seeds move per sampling stream: past every seed of the streams
# before it (seed + 1000 * runner + env index) for fewer than 10,000 runners.
STREAM_SEED_STEP = 10_000_019

PolicyID = str


@dataclass(frozen=True)
class LearnedSpec:
    """What a runner needs to build a learned policy."""

    observation_space: Any
    action_space: Any
    model_config: dict[str, Any]
    gamma: float
    lambda_: float
    normalize_actions: bool = False


def mapped_policy(mapping_fn: Callable[..., PolicyID], agent_id: AgentID, episode: Episode,
                  policies: Mapping[PolicyID, Any], *, acts: bool, unmapped: set[AgentID], figures: str) -> PolicyID | None:
    """The policy ``mapping_fn`` gives ``agent_id`` in ``episode``, which must be in ``policies``;
    for an agent that only receives rewards (``acts=False``), None when the mapping fn raises for
    it, with a warning once per id (``unmapped`` holds those warned of) that its rewards are left
    out of ``figures``.

    Raises:
        ConfigError: the mapping fn raises for an agent that acts, or names no policy.
    """
    try:
        policy_id = map_agent(mapping_fn, agent_id, episode)
    except ConfigError as error:
        if acts:
            raise
        if agent_id not in unmapped:
            unmapped.add(agent_id)
            logger.warning("%s; agent %r was paid but never asked to act: its rewards are left out of %s",
                           error, agent_id, figures)
        return None
    if policy_id not in policies:
        raise ConfigError(f"policy_mapping_fn mapped agent {agent_id!r} to {policy_id!r}, which is not a policy; "
                          f"policies: {sorted(policies)}")
    return policy_id


def check_fixed_action(policy_id: PolicyID, agent_id: AgentID, space: Any, observation: Any, action: Any) -> None:
    """Raise :class:`ConfigError` unless a fixed policy's ``action`` is in the agent's action
    ``space`` and legal under the observation's mask (the fixed policy's fault, not the env's)."""
    mask = observation.get(MASK_KEY) if type(observation) is dict else None
    if type(mask) is not np.ndarray:  # other forms (a tuple of 0/1, group slots): read as numpy masks
        mask = action_masks_of(observation)
    if surely_valid_action(space, action, mask):
        return
    try:
        check_action(agent_id, space, action, mask)
    except InvalidActionError as error:  # IllegalActionError too
        raise ConfigError(f"fixed policy {policy_id!r} chose for agent {agent_id!r}: {error}") from error


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


def _make_env(env_creator: Callable[[dict], Any], env_config: Mapping[str, Any]) -> Any:
    """One env from ``env_creator`` with a fresh copy of ``env_config`` (a picklable factory)."""
    return env_creator(dict(env_config))


def runner_policy(spec: LearnedSpec, torch_threads: int | None = None) -> Any:
    """The inference-only policy of ``spec`` in an env runner.

    The built-in model runs in numpy (:class:`~marl_core.ppo.numpy_policy.NumpyPolicy`), so a
    runner of built-in models never imports torch; a custom torch module runs in a
    :class:`~marl_core.ppo.model.TorchPolicy`; torch is imported then and, unless
    ``torch_threads`` is None, limited to that many threads.
    """
    if runs_in_numpy(spec.model_config):
        return NumpyPolicy(spec.observation_space, spec.action_space, spec.model_config,
                           normalize_actions=spec.normalize_actions)
    import torch

    from marl_core.ppo.model import TorchPolicy

    if torch_threads is not None:
        torch.set_num_threads(torch_threads)
    return TorchPolicy(spec.observation_space, spec.action_space, spec.model_config,
                       normalize_actions=spec.normalize_actions)


class Sampler:
    """Steps a vector of ``num_envs`` envs with the current policies and returns per-policy train batches.

    Args:
        env_creator: ``env_creator(env_config) -> env``; picklable (cloudpickle) for ``"async"``.
        env_config: passed (copied) to every call of ``env_creator``.
        num_envs: envs in the vector.
        worker_index: this runner's index (0: the driver); seeds and episode ids depend on it.
        seed: env ``i`` is first reset with ``seed + 1000 * worker_index + i``; rebuilt envs are
            seeded from their own streams (see :class:`~marl_core.vector.VectorMultiAgentEnv`).
        max_env_errors_in_a_row: failures of one env without a finished episode in between after
            which sampling raises :class:`~marl_core.errors.EnvContractError` (a failure drops
            its episode, so an env that fails in every episode never trains anything).
        vector_mode: ``"sync"`` steps the envs in this process; ``"async"`` in worker processes.
        vector_num_workers: ``"async"`` only: worker processes (default: one per env).
        torch_threads: torch's thread count in this process, set when a policy with a custom
            torch module is first built here (None: leave torch's setting alone).
        stream: 0 for a new run; a run restored from a checkpoint passes one more than the run
            it was saved from, so it samples anew: env seeds move by ``STREAM_SEED_STEP * stream``,
            the action draws use another generator and episode ids start at ``stream << 32``
            (their parity, which seats Connect-4's players, still alternates). Fixed policies
            with a generator of their own (Connect-4's random player) draw from it as before.
    """

    def __init__(self, env_creator: Callable[[dict], Any], env_config: Mapping[str, Any], num_envs: int,
                 *, worker_index: int = 0, seed: int | None = 0, max_env_errors_in_a_row: int = 10,
                 vector_mode: str = "sync", vector_num_workers: int | None = None,
                 torch_threads: int | None = None, stream: int = 0) -> None:
        self.env_creator = env_creator
        self.env_config = dict(env_config)
        self.worker_index = worker_index
        self.seed = seed
        self.stream = stream
        self.max_env_errors_in_a_row = max_env_errors_in_a_row
        if seed is None:
            self.rng = np.random.default_rng()  # not seeded: fresh entropy
        elif stream:
            self.rng = np.random.default_rng([seed, worker_index, stream])
        else:
            self.rng = np.random.default_rng(seed * 7919 + worker_index)
        self.torch_threads = torch_threads
        self.policies: dict[PolicyID, Any] = {}
        self._fixed: frozenset[PolicyID] = frozenset()
        self.specs: dict[PolicyID, LearnedSpec] = {}
        self.to_train: set[PolicyID] = set()
        self.mapping_fn: Callable[..., PolicyID] | None = None
        self._episode_counter = stream << 32
        self.num_env_errors = 0
        factory = functools.partial(_make_env, env_creator, self.env_config)
        # Actions come from the policies (masked) or from fixed callables; the envs check them.
        # Observations are stacked before the next step, so a sync vector need not copy them;
        # what is kept longer (the final obs of an agent that ends early) is copied here.
        self.vector = VectorMultiAgentEnv(
            [factory] * num_envs, vector_mode,  # type: ignore[arg-type]
            num_workers=vector_num_workers, check_actions=False, on_error="rebuild", autoreset_mode="same_step",
            max_rebuild_attempts=max_env_errors_in_a_row, copy=vector_mode != "sync")
        self.num_envs = num_envs
        self.obs: list[dict[AgentID, Any]] = [{} for _ in range(num_envs)]
        self.ending: list[set[AgentID]] = [set() for _ in range(num_envs)]
        self.episodes: list[Episode] = [None] * num_envs  # type: ignore[list-item]
        self.trajectories: list[dict[AgentID, _Trajectory]] = [{} for _ in range(num_envs)]
        # Agents that ended before their episode did: whether terminated, their final obs, and
        # whether the env sent one. Their trajectories keep their last action until the episode
        # ends, and it is still credited.
        self.ended: list[dict[AgentID, tuple[bool, Any, bool]]] = [{} for _ in range(num_envs)]
        self._failures_in_a_row = [0] * num_envs  # failures since the env last finished an episode
        self._first_error: str | None = None  # the first failure of the current sample() call
        self._started = False
        self._unmapped: set[AgentID] = set()  # paid-only ids the mapping fn raised for (warned once)
        self._fitting: set[tuple[AgentID, PolicyID]] = set()  # (agent, policy) pairs whose spaces fit
        self._fixed_spaces: dict[AgentID, Any] = {}  # action spaces of agents that fixed policies act for
        self._env_names = [f"env {index} of runner {worker_index}" for index in range(num_envs)]  # for messages

    def set_policies(self, policies: Mapping[PolicyID, Any], mapping_fn: Callable[..., PolicyID],
                     to_train: set[PolicyID], shared: Mapping[PolicyID, Any] | None = None) -> None:
        """Install policies (LearnedSpec or fixed callables), the mapping fn and the trained set.

        Learned policies that keep their id keep their module; ``shared`` gives modules to use as
        they are (the driver's own, when sampling in the driver). Ongoing episodes whose agents map
        to a removed policy are remapped and their trajectories dropped; the open trajectories of
        agents whose policy no longer trains are dropped too (their next action, not recorded,
        would otherwise leave the last recorded one collecting its rewards).
        """
        current = {}
        shared = shared or {}
        for policy_id, entry in policies.items():
            if isinstance(entry, LearnedSpec):
                old = self.policies.get(policy_id)
                if policy_id in shared:
                    current[policy_id] = shared[policy_id]
                    self.specs[policy_id] = entry
                elif old is not None and policy_id not in self._fixed and self.specs.get(policy_id) == entry:
                    current[policy_id] = old
                else:
                    current[policy_id] = runner_policy(entry, self.torch_threads)
                    self.specs[policy_id] = entry
            else:
                current[policy_id] = entry
        self.policies = current
        self._fixed = frozenset(p for p, entry in policies.items() if not isinstance(entry, LearnedSpec))
        self.mapping_fn = mapping_fn
        self._fitting = set()
        self.to_train = set(to_train)
        for index, episode in enumerate(self.episodes):
            if episode is None:
                continue
            for agent_id, policy_id in list(episode.agent_to_policy.items()):
                if policy_id not in current:
                    del episode.agent_to_policy[agent_id]
                    self.trajectories[index].pop(agent_id, None)
                    self.ended[index].pop(agent_id, None)
                elif policy_id not in self.to_train:
                    self.trajectories[index].pop(agent_id, None)

    def set_weights(self, weights: Mapping[PolicyID, Mapping[str, Any]]) -> None:
        """Load learned weights (policy id -> state dict)."""
        for policy_id, state in weights.items():
            policy = self.policies.get(policy_id)
            if policy is not None and policy_id not in self._fixed:
                policy.set_weights(state)

    # Episodes -----------------------------------------------------------------------------------

    def _new_episode(self, index: int) -> None:
        self._episode_counter += 1
        self.episodes[index] = Episode((self.worker_index << 40) + self._episode_counter, index, self.worker_index)
        self.trajectories[index] = {}
        self.ended[index] = {}
        self.ending[index] = set()

    def _start(self) -> None:
        seed = None if self.seed is None else self.seed + 1000 * self.worker_index + STREAM_SEED_STEP * self.stream
        obs_list, _ = self.vector.reset(seed=seed)
        self._count_failures()
        for index, obs in enumerate(obs_list):
            self._new_episode(index)
            self.obs[index] = obs
        self._started = True

    def _count_failures(self) -> set[int]:
        """Count the vector's failures of its last call; return the failed env indices.

        Raises:
            EnvContractError: an env failed ``max_env_errors_in_a_row`` times without a
                finished episode in between.
        """
        failed = set()
        for index, text in self.vector.last_failures:
            failed.add(index)
            self.num_env_errors += 1
            self._failures_in_a_row[index] += 1
            failures = self._failures_in_a_row[index]
            last_line = next((line for line in reversed(text.strip().splitlines()) if line.strip()), "")
            logger.info("env %d of runner %d raised (%s); it was rebuilt",
                           index, self.worker_index, last_line)
            if self._first_error is None:
                self._first_error = f"env {index} of runner {self.worker_index}: {last_line}"
            if failures >= self.max_env_errors_in_a_row:
                raise EnvContractError(f"env {index} of runner {self.worker_index} failed {failures} times in a row; "
                                       f"last error: {last_line}\n\n{text}")
        return failed

    def policy_of(self, episode: Episode, agent_id: AgentID, acts: bool = True) -> PolicyID | None:
        """The policy of ``agent_id`` in ``episode`` (the mapping fn is asked once per episode);
        ``acts=False`` for an agent that only receives rewards, whose spaces need not fit the
        policy: None, with a warning once per id, when the mapping fn raises for it."""
        policy_id = episode.agent_to_policy.get(agent_id)
        if policy_id is None:
            policy_id = mapped_policy(self.mapping_fn, agent_id, episode, self.policies, acts=acts,
                                      unmapped=self._unmapped, figures="the episode metrics")
            if policy_id is None:
                return None
            if acts and (agent_id, policy_id) not in self._fitting:
                self._check_fit(agent_id, policy_id)
            episode.agent_to_policy[agent_id] = policy_id
        return policy_id

    def _check_fit(self, agent_id: AgentID, policy_id: PolicyID) -> None:
        """Raise unless the learned policy ``policy_id`` takes ``agent_id``'s spaces: the same
        action space (actions go out in the policy's dtype and bounds), and an observation space
        of the same layout (:func:`~marl_core.spaces.same_layout`)."""
        spec = self.specs.get(policy_id)
        if spec is not None and policy_id not in self._fixed:
            obs_space = self.vector.get_observation_space(agent_id)
            act_space = self.vector.get_action_space(agent_id)
            if act_space != spec.action_space or not same_layout(obs_space, spec.observation_space):
                raise SpaceError(
                    f"agent {agent_id!r} is mapped to policy {policy_id!r}, whose spaces are observation "
                    f"{spec.observation_space} and action {spec.action_space}, but the agent's are observation "
                    f"{obs_space} and action {act_space}; map it to a policy of its own (PolicySpec with its spaces)"
                )
        self._fitting.add((agent_id, policy_id))

    # Sampling -----------------------------------------------------------------------------------

    def sample(self, num_env_steps: int) -> dict[str, Any]:
        """Step the envs until ``num_env_steps`` env steps were taken; return batches and metrics.

        Env steps count the envs that stepped. An env whose episode ends is reset by the vector
        within the same vector step (``autoreset_mode="same_step"``); an env that failed and was
        rebuilt takes no env step in that vector step. The last action of each ongoing trajectory
        waits for the next call (its rewards may still come); it keeps the log-probability and value
        of the weights that chose it, so the learner's ratio for it is taken against the policy that
        acted, as RLlib's PPO takes it against its env runners' (not 1 on the first epoch).
        """
        start = time.perf_counter()
        if not self._started:
            self._start()
        out: dict[PolicyID, dict[str, list]] = {}
        finished_episodes: list[dict[str, Any]] = []
        errors_before = self.num_env_errors
        self._first_error = None
        env_steps = agent_steps = 0
        while env_steps < num_env_steps:
            actions, count = self._act()
            agent_steps += count
            obs_list, rewards_list, terminateds_list, truncateds_list, _ = self.vector.step(actions)
            self._count_failures()
            autoreset, reset_results = self.vector.autoreset, self.vector.reset_results
            truncated: list[tuple[PolicyID, Any, _Trajectory, int, AgentID]] = []
            for index in range(self.num_envs):
                # A step that failed comes back as a rebuilt env's first obs (autoreset), and its
                # episode is dropped; a reset that failed after a step keeps the step (below).
                if autoreset[index]:
                    self._new_episode(index)
                    self.obs[index] = obs_list[index]
                    continue
                env_steps += 1
                self._step(index, obs_list[index], rewards_list[index], terminateds_list[index],
                           truncateds_list[index], out, truncated, finished_episodes)
                if reset_results[index] is not None:  # the episode ended; the vector reset the env
                    self._failures_in_a_row[index] = 0
                    self._new_episode(index)
                    self.obs[index] = reset_results[index][0]
            self._bootstrap_truncated(truncated, out)
        for index in range(self.num_envs):
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
            "first_env_error": self._first_error,
            "sample_time_s": time.perf_counter() - start,
        }

    def _act(self) -> tuple[list[dict[AgentID, Any]], int]:
        episodes, ending, obs_list = self.episodes, self.ending, self.obs
        try:
            batches = gather(obs_list, lambda index, agent_id: self.policy_of(episodes[index], agent_id),
                             where=lambda index, agent_id: agent_id not in ending[index], unstacked=self._fixed)
        except SpaceError as error:  # observations that cannot be stacked: name the agents
            self._raise_for_observations(error)
            raise
        actions_by_policy: dict[PolicyID, list[Any]] = {}
        count = 0
        for policy_id, policy_batch in batches.items():
            policy, keys = self.policies[policy_id], policy_batch.keys
            count += len(keys)
            for index, agent_id in keys:
                lengths = episodes[index].lengths
                lengths[agent_id] = lengths.get(agent_id, 0) + 1
            if policy_id in self._fixed:
                chosen = [policy(observation) for observation in policy_batch.obs]
                for (_, agent_id), observation, action in zip(keys, policy_batch.obs, chosen, strict=True):
                    self._check_fixed(policy_id, agent_id, observation, action)
                actions_by_policy[policy_id] = chosen
                continue
            try:
                batch = as_dtype(policy.observation_space, policy_batch.obs)
                self._refuse_non_finite(batch, [(index, agent_id, obs_list[index][agent_id]) for index, agent_id in keys],
                                        "observation", "a policy network cannot take it")
                rows, logps, values = policy.act(batch, explore=True, rng=self.rng)
            except EnvContractError as error:
                stuck = name_stuck_rows(error, keys, "(env index, agent)", policy_id)
                if stuck is None:
                    raise
                raise stuck from error
            except Exception as error:  # an observation outside its space breaks the model: name it
                self._raise_for_observations(error)
                raise
            actions_by_policy[policy_id] = policy.layout.to_env(rows)
            if policy_id not in self.to_train:
                continue
            for row, (index, agent_id) in enumerate(keys):
                trajectory = self.trajectories[index].get(agent_id)
                if trajectory is None:
                    trajectory = self.trajectories[index][agent_id] = _Trajectory()
                trajectory.obs.append(index_obs(batch, row))
                trajectory.actions.append(rows[row])
                trajectory.logp.append(float(logps[row]))
                trajectory.values.append(float(values[row]))
                trajectory.rewards.append(0.0)
        return scatter(actions_by_policy, batches, self.num_envs), count

    def _check_fixed(self, policy_id: PolicyID, agent_id: AgentID, observation: Any, action: Any) -> None:
        """:func:`check_fixed_action`: the vector does not check actions (the learned policies'
        are so by construction)."""
        space = self._fixed_spaces.get(agent_id)
        if space is None:
            space = self._fixed_spaces[agent_id] = self.vector.get_action_space(agent_id)
        check_fixed_action(policy_id, agent_id, space, observation, action)

    def _raise_for_observations(self, error: Exception, rows: list[tuple[int, AgentID, Any]] | None = None,
                                what: str = "observations") -> None:
        """Raise an :class:`EnvContractError` naming the ``rows`` (env index, agent, observation;
        default: every acting agent's) whose observations the model cannot take
        (:func:`~marl_core.ppo.batching.unfit`), if any, as the cause of ``error``; return
        otherwise (the error is not theirs)."""
        if rows is None:
            rows = [(index, agent_id, observation) for index, obs in enumerate(self.obs)
                    for agent_id, observation in obs.items() if agent_id not in self.ending[index]]
        found = unfit_descriptions([(f"agent {agent_id!r} in env {index}", self.vector.get_observation_space(agent_id),
                                     observation) for index, agent_id, observation in rows])
        if found:
            raise EnvContractError(f"runner {self.worker_index}: {what} outside their spaces: {listed(found)}") from error

    def _refuse_non_finite(self, batch: Any, rows: list[tuple[int, AgentID, Any]], what: str, why: str) -> None:
        """Raise naming the first of ``rows`` (env index, agent, observation) whose row of
        ``batch`` holds NaN or infinity."""
        row = _non_finite_row(batch)
        if row is not None:
            index, agent_id, observation = rows[row]
            raise EnvContractError(f"{what} of agent {agent_id!r} in {self._env_names[index]} holds NaN or "
                                   f"infinity: {_shown(observation)}; {why}")

    def _step(self, index: int, obs: dict[AgentID, Any], rewards: Mapping[AgentID, Any],
              terminateds: Mapping[AgentID, bool], truncateds: Mapping[AgentID, bool], out: dict, truncated: list,
              finished: list) -> None:
        """Credit the rewards of env ``index``'s step and end the trajectories that ended."""
        episode, trajectories = self.episodes[index], self.trajectories[index]
        episode.env_steps += 1
        for agent_id, reward in rewards.items():
            value = scalar_reward(agent_id, reward, self._env_names[index])
            if not -math.inf < value < math.inf:  # NaN fails too: it would reach the weights
                raise EnvContractError(f"{self._env_names[index]} gave agent {agent_id!r} a reward of {value}; "
                                       "rewards must be finite numbers")
            episode.returns[agent_id] = episode.returns.get(agent_id, 0.0) + value
            trajectory = trajectories.get(agent_id)
            if trajectory is not None and trajectory.rewards:
                trajectory.rewards[-1] += value
        all_terminated = bool(terminateds.get(ALL, False))
        all_done = all_terminated or bool(truncateds.get(ALL, False))
        ended = self.ended[index]
        back = [a for a in obs if a in ended] if ended else None
        if back:
            raise EnvContractError(f"agents {back} of env {index} terminated or truncated earlier in the episode "
                                   "but are in its obs dict again; an agent that ended never comes back")
        if not all_done:
            # An agent that ends before its episode ships all but its last action (bootstrapped with
            # that action's value); the last one waits for the end, so later rewards still count.
            # An agent flagged without a final observation ends too (bootstrapped, if truncated,
            # with the value of its last observation).
            for flags in (terminateds, truncateds):
                for agent_id, flag in flags.items():
                    if not flag or agent_id == ALL or agent_id in ended or not (agent_id in obs or agent_id in trajectories):
                        continue
                    ended[agent_id] = (bool(terminateds.get(agent_id)), snapshot(obs.get(agent_id)), agent_id in obs)
                    trajectory = trajectories.get(agent_id)
                    if trajectory is not None and len(trajectory.rewards) > 1:
                        self._ship(episode.agent_to_policy[agent_id], trajectory, out, len(trajectory.rewards) - 1,
                                   trajectory.values[-1], terminated=False)
        for agent_id in list(trajectories) if all_done else ():
            trajectory = trajectories.pop(agent_id)
            if not trajectory.rewards:
                continue
            policy_id = episode.agent_to_policy[agent_id]
            if agent_id in ended:
                terminated, final_obs, has_final = ended[agent_id]
            else:
                terminated = bool(terminateds.get(agent_id, False)) or (
                    all_terminated and not truncateds.get(agent_id, False))
                final_obs, has_final = obs.get(agent_id), agent_id in obs
            if terminated:
                self._ship(policy_id, trajectory, out, len(trajectory.rewards), 0.0, terminated=True)
            elif has_final:
                truncated.append((policy_id, final_obs, trajectory, index, agent_id))
            else:
                self._ship(policy_id, trajectory, out, len(trajectory.rewards), trajectory.values[-1], False)
        if all_done:
            for agent_id in episode.returns:  # paid, never asked to act: an agent-episode of no action
                if agent_id not in episode.lengths and agent_id not in episode.agent_to_policy:
                    self.policy_of(episode, agent_id, acts=False)
            for agent_id, policy_id in episode.agent_to_policy.items():
                finished.append({"episode_id": episode.id_, "policy_id": policy_id, "agent_id": agent_id,
                                 "return": episode.returns.get(agent_id, 0.0),
                                 "length": episode.lengths.get(agent_id, 0), "env_steps": episode.env_steps})
            self.obs[index], self.ending[index] = {}, set()  # the caller installs the new episode
        else:
            self.obs[index] = obs
            self.ending[index] = {a for a in obs if terminateds.get(a) or truncateds.get(a)}

    def _bootstrap_truncated(self, truncated: list, out: dict) -> None:
        """Ship the trajectories of agents truncated in this step, bootstrapped with the value of
        their final observations (checked as the observations of acting agents are)."""
        by_policy: dict[PolicyID, list] = {}
        for policy_id, observation, trajectory, index, agent_id in truncated:
            by_policy.setdefault(policy_id, []).append((observation, trajectory, index, agent_id))
        for policy_id, items in by_policy.items():
            policy = self.policies[policy_id]
            rows = [(index, agent_id, observation) for observation, _, index, agent_id in items]
            try:
                batch = stack_obs(policy.observation_space, [observation for _, _, observation in rows])
                self._refuse_non_finite(batch, rows, "final observation", "its value bootstraps the agent's returns")
                values = policy.value(batch)
            except EnvContractError:
                raise
            except Exception as error:  # a final observation outside its space: name it
                self._raise_for_observations(error, rows, "final observations")
                raise
            for value, (_, trajectory, _, _) in zip(values, items, strict=True):
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
        """Close the vector (every env, and its worker processes in ``"async"`` mode)."""
        self.vector.close()


class EnvRunner:
    """A Ray actor around a :class:`Sampler`; state from the driver arrives cloudpickled."""

    def __init__(self, env_creator_blob: bytes, env_config: dict, num_envs: int, worker_index: int,
                 seed: int | None, max_env_errors_in_a_row: int, log_level: str, vector_mode: str = "sync",
                 vector_num_workers: int | None = None, torch_threads: int = 1, stream: int = 0) -> None:
        import cloudpickle

        logging.basicConfig(level=log_level)
        self.sampler = Sampler(cloudpickle.loads(env_creator_blob), env_config, num_envs, worker_index=worker_index,
                               seed=seed, max_env_errors_in_a_row=max_env_errors_in_a_row,
                               vector_mode=vector_mode, vector_num_workers=vector_num_workers,
                               torch_threads=torch_threads, stream=stream)
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


def _non_finite_row(batch: Any) -> int | None:
    """The first row of ``batch`` with NaN or infinity in a float leaf, or None (one pass per leaf)."""
    if isinstance(batch, dict):
        leaves = list(batch.values())
    elif isinstance(batch, tuple):
        leaves = list(batch)
    else:
        leaves = [batch]
    first = None
    for leaf in leaves:
        if isinstance(leaf, (dict, tuple)):
            row = _non_finite_row(leaf)
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f" and not np.isfinite(leaf).all():
            row = int(np.argmin(np.isfinite(leaf).reshape(len(leaf), -1).all(axis=1)))
        else:
            continue
        if row is not None and (first is None or row < first):
            first = row
    return first


def _shown(value: Any) -> str:
    """``value`` for an error message, arrays in full up to a few hundred entries."""
    with np.printoptions(threshold=200):
        return repr(value)
