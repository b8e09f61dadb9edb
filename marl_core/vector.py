"""Vectorized multi-agent envs: :class:`VectorMultiAgentEnv` steps N MultiAgentEnvs at once.

``mode="sync"`` steps the envs one after the other in this process; ``mode="async"`` steps them
in parallel in worker processes, one per env by default (``forkserver`` where available, else
``spawn``; never ``fork``, which Ray and torch do not survive). Both give identical results.
With ``on_error="rebuild"`` a sub-env that raises is rebuilt alone and the others go on.

:func:`gather` stacks, per policy, the observations of its agents across all envs so that one
forward pass serves them all; :func:`scatter` sends the batched actions back as action dicts.

Example:
    >>> from marl_core.vector import VectorMultiAgentEnv, gather, scatter
    >>> from marl_core.envs import RockPaperScissors
    >>> with VectorMultiAgentEnv([RockPaperScissors, RockPaperScissors]) as venv:
    ...     obs_list, infos_list = venv.reset(seed=0)
    ...     batches = gather(obs_list, lambda env_index, agent_id: "shared")
    ...     print(batches["shared"].keys, batches["shared"].obs)
    ...     actions = scatter({"shared": [0, 1, 2, 0]}, batches, venv.num_envs)
    ...     obs_list, rewards_list, terminateds_list, truncateds_list, infos_list = venv.step(actions)
    ...     print(rewards_list)
    [(0, 'player1'), (0, 'player2'), (1, 'player1'), (1, 'player2')] [0 0 0 0]
    [{'player1': -1, 'player2': 1}, {'player1': -1, 'player2': 1}]
"""

from __future__ import annotations

import copy
import logging
import traceback
import weakref
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from marl_core._vector_workers import (
    ResetFailure,
    UnsendableError,
    Workers,
    build_env,
    call_text,
    copied,
    error_text,
    exception_of,
    execute,
    own_actions,
    rebuild,
    remote_error,
)
from marl_core.env import ALL, AgentID, MultiAgentEnv, seed_value
from marl_core.errors import (
    MultiAgentEnvError,
    ResetNeededError,
    SpaceError,
    VectorEnvError,
    a_type,
)
from marl_core.spaces import SlotMasks, action_masks_of, check_acting, check_action, surely_valid_action

logger = logging.getLogger(__name__)

__all__ = ["PolicyBatch", "VectorMultiAgentEnv", "gather", "scatter", "stack"]

_Result = tuple[list[dict[AgentID, Any]], ...]


class VectorMultiAgentEnv:
    """N MultiAgentEnvs stepped together, in this process or in worker processes.

    Args:
        env_fns: one zero-argument factory per env. In ``"async"`` mode they are pickled with
            cloudpickle, so lambdas and closures work; what they reference must be importable in
            a fresh interpreter, and a script must guard its entry point (``if __name__ ==
            "__main__":``).
        mode: ``"sync"`` (one process) or ``"async"`` (worker processes stepping in parallel).
        num_workers: ``"async"`` only: how many worker processes share the envs (contiguous
            chunks, each stepped in turn inside its worker). Default: one per env. Fewer
            workers than envs pays off when env steps are cheap next to a round trip between
            processes (board games), or when there are more envs than CPU cores.
        check_actions: validate every action dict in this process before any env steps: the
            keys must be exactly the agents asked to act, every action inside its space and, for
            masked Discrete actions, legal (a grouped agent's members, each under the mask in
            its slot of the group's Tuple observation, too). A bad dict then raises with
            nothing stepped.
        context: the multiprocessing start method of ``"async"`` mode (default: ``"forkserver"``
            where available, else ``"spawn"``).
        on_error: what an exception inside a sub-env's ``reset``/``step`` does: ``"raise"`` (the
            default) raises :class:`~marl_core.errors.VectorEnvError` and the vector needs
            ``reset()``; ``"rebuild"`` isolates the failure to that env (see Semantics).
        autoreset_mode: ``"next_step"`` (the default: an ended env is reset by the next
            ``step()``) or ``"same_step"`` (reset within the ``step()`` that ended it; see Semantics).
        max_rebuild_attempts: ``on_error="rebuild"`` only: attempts at rebuilding one failed env
            within one call (a factory or first ``reset`` that raises again uses one) before the
            call raises ``VectorEnvError``.
        copy: ``"sync"`` only: ``reset()`` and ``step()`` return copies of the dicts, lists,
            sets and arrays each env returned, made as soon as it returned them, and each env
            steps with a copy of its actions (the default), so that results kept do not change
            when the envs step again, and an env keeping an action does not see the caller
            change it, as in ``"async"`` mode, where both travel pickled. With False a sync
            vector hands over the objects themselves, a little faster: use what you keep before
            the next call. ``call()`` returns what the envs return.

    Semantics:
        - ``reset(seed=s)`` resets env ``i`` with ``seed=s + i`` (``None`` stays ``None``), or
          with ``seed=s[i]`` when ``s`` is a list of one int or None per env, and its own copy
          of ``options``, and returns ``(obs_list, infos_list)``, one dict per env.
        - ``step(action_list)`` takes one action dict per env and returns ``(obs_list,
          rewards_list, terminateds_list, truncateds_list, infos_list)``: what each env
          returned (copied, see ``copy``), otherwise untouched. Rewards, dead agents, ``"__all__"``, chance and action masks are
          the sub-envs' own (see DESIGN.md).
        - **Autoreset:** an env whose episode ended (``"__all__"`` in its terminateds or
          truncateds) is reset on the next ``step()``: its action dict in that call is ignored
          (it may be empty), and its entries are the new episode's first observations and infos,
          with rewards ``{}`` and ``{"__all__": False}`` terminateds and truncateds.
          :attr:`autoreset` tells which envs were reset by the last ``step()``. An autoreset
          passes ``seed=None``, so each env's RNG continues from its seeded state and seeded
          runs repeat exactly.
        - **Same-step autoreset** (``autoreset_mode="same_step"``): an env whose episode ends in
          a ``step()`` is reset (``seed=None``) within that same call, in its own process, so no
          call is spent on resets. The call returns the ended episode's final results as usual
          (its observations and infos copied before the reset, which may reuse their arrays);
          :attr:`reset_results` holds ``(obs, infos)`` of the new episode for that env (None for
          the others, and for every env after ``reset()``) and :attr:`acting` already lists the
          new episode's agents.
        - :attr:`acting` lists, per env, the agents that must send an action to the next
          ``step()`` (empty for an env that will be reset).
        - Errors: bad input raises :class:`~marl_core.errors.VectorEnvError` naming the env,
          before any env steps. An exception inside a sub-env comes back as a ``VectorEnvError``
          with the env index, the call and, in ``"async"`` mode, the worker's traceback; the
          other envs run their command all the same (in both modes), and the vector then needs
          ``reset()``. A worker that dies makes the vector unusable except for ``close()``.
        - In ``"async"`` mode results travel pickled (large arrays through shared memory, or
          the pipe where ``/dev/shm`` has no room); instances of classes defined in the user's
          script go by value, as its factories do.
        - **Fault isolation** (``on_error="rebuild"``): a sub-env whose ``reset``/``step`` raises
          is closed (best effort), rebuilt from its factory (in its worker process in ``"async"``
          mode) and reset (with the options of the ``reset()`` that failed, if one did; an
          autoreset has none) with a seed drawn from that env's own RNG stream (seeded by
          ``reset(seed=s)`` from ``s + i``, so seeded runs repeat); the other envs' results are
          kept. The call returns the rebuilt env's first observations as for an autoreset (rewards
          ``{}``, ``{"__all__": False}``; :attr:`autoreset` is True for it), and reports the
          failure in :attr:`last_failures` (``(env_index, traceback_text)`` per failure of the
          last call) and :attr:`num_env_errors` (a running count). With same-step autoreset, a
          reset that raises after a step that ended the episode keeps that step's results; the
          rebuilt env's first observations go into :attr:`reset_results`. A dead worker process
          is still an error that makes the vector unusable.
        - ``close()`` (idempotent; also on leaving a ``with`` block, on garbage collection and at
          interpreter exit) closes every env and stops every worker process. Workers also exit
          by themselves when this process dies.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], MultiAgentEnv]],
        mode: Literal["sync", "async"] = "sync",
        *,
        num_workers: int | None = None,
        check_actions: bool = True,
        context: str | None = None,
        on_error: Literal["raise", "rebuild"] = "raise",
        autoreset_mode: Literal["next_step", "same_step"] = "next_step",
        max_rebuild_attempts: int = 3,
        copy: bool = True,
    ) -> None:
        if mode not in ("sync", "async"):
            raise VectorEnvError(f"mode must be 'sync' or 'async', received {mode!r}")
        if not isinstance(env_fns, Sequence) or isinstance(env_fns, str):
            raise VectorEnvError(f"env_fns must be a list of env factories, received {a_type(env_fns)}")
        if len(env_fns) == 0:
            raise VectorEnvError("env_fns is empty: a vector needs at least one env factory")
        for index, env_fn in enumerate(env_fns):
            if not callable(env_fn):
                built = " (an env, built already: pass a function that builds one, e.g. lambda: MyEnv())" if (
                    hasattr(env_fn, "reset") and hasattr(env_fn, "step")) else ""
                raise VectorEnvError(f"env {index}: expected an env factory (a callable returning a new env), "
                                     f"received {a_type(env_fn)}{built}", index)
        for name, value in (("num_workers", num_workers), ("max_rebuild_attempts", max_rebuild_attempts)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                raise VectorEnvError(f"{name} must be an integer, received {value!r}")
        if mode == "sync" and (num_workers is not None or context is not None):
            raise VectorEnvError("num_workers and context apply to mode='async' only")
        if mode == "async" and not copy:
            raise VectorEnvError("copy=False applies to mode='sync' only: async results always arrive as copies")
        if on_error not in ("raise", "rebuild"):
            raise VectorEnvError(f"on_error must be 'raise' or 'rebuild', received {on_error!r}")
        if autoreset_mode not in ("next_step", "same_step"):
            raise VectorEnvError(f"autoreset_mode must be 'next_step' or 'same_step', received {autoreset_mode!r}")
        if max_rebuild_attempts < 1:
            raise VectorEnvError(f"max_rebuild_attempts must be at least 1, received {max_rebuild_attempts}")
        self.mode = mode
        self._copy = copy
        self.on_error = on_error
        self.autoreset_mode = autoreset_mode
        self.reset_results: list[tuple[dict[AgentID, Any], dict[AgentID, Any]] | None] = [None] * len(env_fns)
        self.max_rebuild_attempts = max_rebuild_attempts
        self.num_envs = len(env_fns)
        self.last_failures: list[tuple[int, str]] = []
        self.num_env_errors = 0
        self._env_fns = list(env_fns)
        self._rebuild_rngs = [np.random.default_rng() for _ in range(self.num_envs)]
        self.check_actions = check_actions
        self.autoreset: list[bool] = [False] * self.num_envs
        self.acting: list[list[AgentID]] = [[] for _ in range(self.num_envs)]
        self._needs_reset = [True] * self.num_envs
        self._masks: list[dict[AgentID, np.ndarray | SlotMasks]] = [{} for _ in range(self.num_envs)]
        self._action_spaces: list[dict[AgentID, gym.Space]] = [{} for _ in range(self.num_envs)]
        self._observation_spaces: dict[AgentID, gym.Space] = {}
        self._reset_needed: str | None = "called before reset()"  # what step() says until reset() (None: no need)
        self._broken: str | None = None
        self._closed = False
        self._envs: list[MultiAgentEnv] = []
        self._workers: Workers | None = None
        if mode == "sync":
            for index, env_fn in enumerate(env_fns):
                try:
                    self._envs.append(build_env(env_fn, self._envs, index))
                except Exception as error:
                    _close_envs(self._envs)  # those built already, as a worker does with its own
                    message = f"env {index}: its factory raised {type(error).__name__}: {error_text(error)}"
                    raise VectorEnvError(message, index) from error
            # The list, not the vector: rebuilt envs replace their slots in it.
            self._finalizer = weakref.finalize(self, _close_envs, self._envs)
        else:
            workers = self.num_envs if num_workers is None else num_workers
            if not 1 <= workers <= self.num_envs:
                raise VectorEnvError(f"num_workers must be between 1 and {self.num_envs} (the number of envs), received {num_workers}")
            self._workers = Workers(env_fns, workers, context)
            self._finalizer = weakref.finalize(self, self._workers.shutdown)

    # Introspection ------------------------------------------------------------------------

    @property
    def possible_agents(self) -> list[AgentID]:
        """The ``possible_agents`` of env 0."""
        return list(self._call(0, "call", ("possible_agents", (), {})))

    def get_observation_space(self, agent_id: AgentID) -> gym.Space:
        """The observation space of ``agent_id`` in env 0."""
        if agent_id not in self._observation_spaces:
            self._observation_spaces.update(self._call(0, "spaces", ("observation", [agent_id])))
        return self._observation_spaces[agent_id]

    def get_action_space(self, agent_id: AgentID) -> gym.Space:
        """The action space of ``agent_id`` in env 0."""
        return self._action_space(0, agent_id)

    def call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Call method ``name`` of every env (or read attribute ``name`` when no args are given
        and it is not callable) and return the results, one per env."""
        return [self._call(i, "call", (name, args, kwargs)) for i in range(self.num_envs)]

    # Episode API --------------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[AgentID, Any]], list[dict[AgentID, Any]]]:
        """Reset every env, env ``i`` with ``seed + i`` (or ``seed[i]`` from a list of one seed
        or None per env, as Gymnasium's vector envs take it) and its own copy of ``options``;
        return ``(obs_list, infos_list)``.

        Raises:
            VectorEnvError: a list of seeds whose length is not ``num_envs``.
            SeedError: a seed that is not a non-negative integer (before any env resets).
        """
        self._check_usable()
        seeds = self._seeds(seed)
        for index, own_seed in enumerate(seeds):
            if own_seed is not None:
                self._rebuild_rngs[index] = np.random.default_rng([own_seed % 2**63, 0x5EED])
        copies = _copies(options, self.num_envs + 1)
        pristine = copies.pop()  # untouched by the envs: for rebuilds after a failed reset
        commands = [("reset", (own_seed, own)) for own_seed, own in zip(seeds, copies, strict=True)]
        results = self._run_all(commands, reset_options=pristine)
        obs_list = [obs for obs, _ in results]
        for index, obs in enumerate(obs_list):
            self._started(index, obs)
        self.autoreset = [False] * self.num_envs
        self.reset_results = [None] * self.num_envs
        self._reset_needed = None
        return obs_list, [infos for _, infos in results]

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """One seed (a Python int) or None per env, from ``reset``'s ``seed``."""
        if (isinstance(seed, Sequence) and not isinstance(seed, (str, bytes))) or (
                isinstance(seed, np.ndarray) and seed.ndim > 0):  # a 0-d array is refused as one seed
            if len(seed) != self.num_envs:
                raise VectorEnvError(f"reset(seed=...) needs one seed (or None) per env ({self.num_envs}), "
                                     f"received a {type(seed).__name__} of {len(seed)}: {seed!r:.80}")
            return [seed_value(own) for own in seed]
        first = seed_value(seed)  # numpy integers as Python ints; a SeedError before anything resets
        return [None if first is None else first + index for index in range(self.num_envs)]

    def step(self, action_list: Sequence[Mapping[AgentID, Any]]) -> _Result:
        """Step every env with its action dict (autoresetting ended envs); see the class doc."""
        self._check_usable()
        if self._reset_needed is not None:
            raise ResetNeededError(f"VectorMultiAgentEnv.step() {self._reset_needed}")
        if isinstance(action_list, (Mapping, str)) or not hasattr(action_list, "__len__"):
            # A single action dict: its keys would be taken for the envs' action dicts.
            raise VectorEnvError(f"step() needs a list of action dicts, one per env ({self.num_envs}), received "
                                 f"{type(action_list).__name__} {action_list!r:.80}")
        if len(action_list) != self.num_envs:
            raise VectorEnvError(
                f"step() needs one action dict per env ({self.num_envs}), received {len(action_list)}"
            )
        step_command = "step_reset" if self.autoreset_mode == "same_step" else "step"
        commands: list[tuple[str, Any]] = []
        for index, actions in enumerate(action_list):
            if self._needs_reset[index]:
                commands.append(("reset", (None, None)))
                continue
            if self.check_actions:
                self._validate(index, actions)
            commands.append((step_command, actions))
        results = self._run_all(commands)
        failed = {index for index, _ in self.last_failures}  # the steps that failed (envs rebuilt)
        if step_command == "step_reset":
            self._handle_failed_resets(commands, results)
        obs_out: list[dict[AgentID, Any]] = []
        rewards_out: list[dict[AgentID, Any]] = []
        terminateds_out: list[dict[AgentID, Any]] = []
        truncateds_out: list[dict[AgentID, Any]] = []
        infos_out: list[dict[AgentID, Any]] = []
        autoreset = [False] * self.num_envs
        reset_results: list[Any] = [None] * self.num_envs
        for index, result in enumerate(results):
            command = commands[index][0]
            if command == "reset" or index in failed:  # an autoreset, or a rebuilt env
                obs, infos = result
                rewards, terminateds, truncateds = {}, {ALL: False}, {ALL: False}
                autoreset[index] = True
                self._started(index, obs)
            else:
                if command != "step":  # a same-step autoreset
                    result, reset_results[index] = result
                obs, rewards, terminateds, truncateds, infos = result
                self._stepped(index, obs, rewards, terminateds, truncateds)
                if reset_results[index] is not None:
                    self._started(index, reset_results[index][0])
            obs_out.append(obs)
            rewards_out.append(rewards)
            terminateds_out.append(terminateds)
            truncateds_out.append(truncateds)
            infos_out.append(infos)
        self.autoreset, self.reset_results = autoreset, reset_results
        return obs_out, rewards_out, terminateds_out, truncateds_out, infos_out

    def __reduce__(self) -> Any:
        # A copy would share the envs (sync) or hold no workers (async), and close neither.
        raise VectorEnvError("a VectorMultiAgentEnv cannot be pickled or copied: its envs and worker processes "
                             "belong to it; pickle the env factories and build another vector from them")

    def close(self) -> None:
        """Close every env and stop every worker process; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __enter__(self) -> VectorMultiAgentEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<VectorMultiAgentEnv num_envs={self.num_envs} {'closed' if self._closed else self.mode}>"

    # Internals ----------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._closed:
            raise VectorEnvError("the VectorMultiAgentEnv is closed")
        if self._broken is None and self._workers is not None:
            self._broken = self._workers.stopped_because
        if self._broken is not None:
            raise VectorEnvError(f"the VectorMultiAgentEnv is unusable: {self._broken}; create a new one")

    def _started(self, index: int, obs: Mapping[AgentID, Any]) -> None:
        self._needs_reset[index] = False
        self.acting[index] = list(obs)
        if self.check_actions:  # masks serve the checks only
            self._masks[index] = _masks_of(obs)

    def _stepped(self, index: int, obs: Mapping, rewards: Any, terminateds: Mapping, truncateds: Mapping) -> None:
        if terminateds.get(ALL, False) or truncateds.get(ALL, False):
            self._needs_reset[index] = True
            self.acting[index] = []
            self._masks[index] = {}
            return
        self.acting[index] = [a for a in obs if not (terminateds.get(a, False) or truncateds.get(a, False))]
        if self.check_actions:  # masks serve the checks only
            self._masks[index] = _masks_of(obs)

    def _validate(self, index: int, actions: Mapping[AgentID, Any]) -> None:
        acting = self.acting[index]
        try:
            check_acting(actions, acting)
            missing_spaces = [a for a in acting if a not in self._action_spaces[index]]
            if missing_spaces:
                self._action_spaces[index].update(self._call(index, "spaces", ("action", missing_spaces)))
            spaces_, masks = self._action_spaces[index], self._masks[index]
            for agent_id in acting:
                space, action, mask = spaces_[agent_id], actions[agent_id], masks.get(agent_id)
                if not surely_valid_action(space, action, mask):
                    check_action(agent_id, space, action, mask)
        except MultiAgentEnvError as error:
            if isinstance(error, VectorEnvError):
                raise
            raise VectorEnvError(f"env {index}: {error}", index) from error

    def _action_space(self, index: int, agent_id: AgentID) -> gym.Space:
        if agent_id not in self._action_spaces[index]:
            self._action_spaces[index].update(self._call(index, "spaces", ("action", [agent_id])))
        return self._action_spaces[index][agent_id]

    def _call(self, index: int, command: str, payload: Any) -> Any:
        self._check_usable()
        if self._workers is None:
            return self._sync_execute(index, command, payload)
        return self._collect({index: (command, payload)})[index]

    def _run_all(self, commands: list[tuple[str, Any]], reset_options: Any = None) -> list[Any]:
        """Run one command per env; ``reset_options`` are those of a caller's ``reset()`` (a step's
        autoresets have none)."""
        self.last_failures = []
        try:
            if self.on_error == "rebuild":
                results = self._run_all_isolated(commands, reset_options)
            elif self._workers is None:
                results = self._sync_run_all(commands)
            else:
                replies = self._collect(dict(enumerate(commands)))
                results = [replies[index] for index in range(self.num_envs)]
            return results
        except UnsendableError:
            raise  # nothing reached any env
        except VectorEnvError as error:
            if self.on_error != "rebuild":  # a rebuild that failed has said why already
                self._needs_reset_after(error)
            raise
        except BaseException as error:  # Ctrl-C: some envs may have moved on, the others not
            self._needs_reset = [True] * self.num_envs
            self._reset_needed = f"needs reset() after its last call was interrupted by {type(error).__name__}"
            raise

    def _sync_run_all(self, commands: list[tuple[str, Any]]) -> list[Any]:
        """Every env runs its command, as in async mode, even after one failed; then the first
        failure raises (so both modes leave the envs in the same state)."""
        results: list[Any] = []  # the hot path of a sync vector's step: a plain list
        errors: dict[int, VectorEnvError] = {}
        for index, (command, payload) in enumerate(commands):
            try:
                results.append(self._sync_execute(index, command, payload))
            except VectorEnvError as error:
                errors[index] = error
                results.append(None)
        if errors:
            error = errors[min(errors)]
            others = f" (envs {sorted(errors)} failed)" if len(errors) > 1 else ""
            others += _failed_resets_beside(commands, {i: r for i, r in enumerate(results) if i not in errors})
            if others:
                raise VectorEnvError(f"{error}{others}", error.index) from error.__cause__
            raise error
        return results

    def _sync_execute(self, index: int, command: str, payload: Any) -> Any:
        try:
            return self._run_here(index, command, payload)
        except Exception as error:
            raise VectorEnvError(
                f"env {index} raised {type(error).__name__} during {call_text(command, payload)}: {error_text(error)}", index
            ) from error

    def _collect(self, commands: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """Run ``commands`` in the workers; their results, or raise for the first env that failed."""
        replies = self._workers.request(commands)
        failures = {i: reply for i, (status, reply) in replies.items() if status != "ok"}
        if not failures:
            return {i: reply for i, (_, reply) in replies.items()}
        index = min(failures)
        failure = failures[index]
        others = f" (envs {sorted(failures)} failed)" if len(failures) > 1 else ""
        others += _failed_resets_beside(commands, {i: reply for i, (status, reply) in replies.items() if status == "ok"})
        dead = [i for i, reply in sorted(failures.items()) if isinstance(reply, str)]  # worker processes gone
        if dead:
            self._broken = failures[dead[0]]
        during = f" during {call_text(*commands[index])}"
        if isinstance(failure, str):  # its worker process is gone
            raise VectorEnvError(failure + during + others, index)
        if dead:
            others += f"; {self._broken}"
        raise remote_error(f"env {index} raised", index, failure, others, during) from exception_of(failure)

    def _handle_failed_resets(self, commands: list[tuple[str, Any]], results: list[Any]) -> None:
        """Same-step autoresets that raised: with ``on_error="rebuild"`` the step's results stay
        and the env is rebuilt for the next episode; else the first one raises."""
        failed = {
            index: result[1]
            for index, result in enumerate(results)
            if commands[index][0] == "step_reset" and isinstance(result[1], ResetFailure)
        }
        if not failed:
            return
        if self.on_error == "rebuild":
            for index, first_obs in self._rebuild({i: f.text for i, f in failed.items()}).items():
                results[index] = (results[index][0], first_obs)
            return
        index = min(failed)
        others = f" (envs {sorted(failed)} failed)" if len(failed) > 1 else ""
        what, cause = f"env {index} raised", failed[index].error
        during = " during reset() (the same-step autoreset after its episode ended)"
        if cause is not None:  # raised in this process: its own traceback is chained
            error = VectorEnvError(f"{what} {type(cause).__name__}{during}: {error_text(cause)}{others}", index)
        else:
            failure = failed[index].failure
            error, cause = remote_error(what, index, failure, others, during), exception_of(failure)
        self._needs_reset_after(error)
        raise error from cause

    def _needs_reset_after(self, error: VectorEnvError) -> None:
        self._needs_reset = [True] * self.num_envs
        self._reset_needed = f"needs reset() after the error of its last call ({str(error).splitlines()[0]})"

    def _run_all_isolated(self, commands: list[tuple[str, Any]], reset_options: Any = None) -> list[Any]:
        """``_run_all`` for ``on_error="rebuild"``: failed envs are rebuilt, the others kept."""
        replies = self._attempt(dict(enumerate(commands)))
        results = {index: reply for index, (status, reply) in replies.items() if status == "ok"}
        failed = {i: reply for i, (status, reply) in replies.items() if status != "ok"}
        # A reset that failed is retried with the caller's options (a step's autoreset has none),
        # not the copy the failed env may have changed.
        options = {i: reset_options for i in failed if commands[i][0] == "reset"}
        results.update(self._rebuild(failed, options))
        return [results[index] for index in range(self.num_envs)]

    def _rebuild(self, failed: dict[int, str], options: dict[int, Any] | None = None) -> dict[int, Any]:
        """Record the failures in ``failed`` (env index -> traceback text) and rebuild those envs,
        retrying up to ``max_rebuild_attempts``; return each rebuilt env's ``(obs, infos)``. Each
        rebuilt env is reset with its ``options`` (None for envs not in it)."""
        options = options or {}
        rebuilt: dict[int, Any] = {}
        for attempt in range(self.max_rebuild_attempts + 1):
            if not failed:
                return rebuilt
            for index, text in sorted(failed.items()):
                self.last_failures.append((index, text))
                self.num_env_errors += 1
                logger.warning("env %d raised (failure %d of this call):\n%s", index, attempt + 1, text)
                self._action_spaces[index] = {}
            if attempt == self.max_rebuild_attempts:
                break
            seeds = {i: int(self._rebuild_rngs[i].integers(2**31)) for i in failed}
            replies = self._attempt({i: ("rebuild", (seed, _copies(options.get(i), 1)[0])) for i, seed in seeds.items()})
            rebuilt.update({i: reply for i, (status, reply) in replies.items() if status == "ok"})
            failed = {i: reply for i, (status, reply) in replies.items() if status != "ok"}
        index = min(failed)
        self._needs_reset = [True] * self.num_envs
        self._reset_needed = f"needs reset() after env {index} could not be rebuilt"
        raise VectorEnvError(
            f"env {index} could not be rebuilt in {self.max_rebuild_attempts} attempts; last error:\n{failed[index]}",
            index,
        )

    def _run_here(self, index: int, command: str, payload: Any) -> Any:
        """``command`` on env ``index`` of a sync vector, with copies going in and out (``copy``)."""
        if not self._copy:
            return execute(self._envs[index], command, payload)
        return copied(command, execute(self._envs[index], command, own_actions(command, payload)))

    def _attempt(self, commands: dict[int, tuple[str, Any]]) -> dict[int, tuple[str, Any]]:
        """Run ``commands``; per env ``("ok", result)`` or ``("error", traceback_text)``."""
        if self._workers is None:
            replies: dict[int, tuple[str, Any]] = {}
            for index, (command, payload) in commands.items():
                try:
                    if command == "rebuild":
                        result = rebuild(self._envs, index, self._env_fns[index], payload)
                        replies[index] = ("ok", copied(command, result) if self._copy else result)
                    else:
                        replies[index] = ("ok", self._run_here(index, command, payload))
                except Exception:
                    replies[index] = ("error", traceback.format_exc())
            return replies
        replies = self._workers.request(commands)
        dead = {i: reply for i, (status, reply) in replies.items() if status == "dead"}
        if dead:
            index = min(dead)
            self._broken = dead[index]
            raise VectorEnvError(f"{self._broken} during {call_text(*commands[index])}", index)
        return {i: (status, reply if status == "ok" else reply[2]) for i, (status, reply) in replies.items()}


def _copies(options: Any, count: int) -> list[Any]:
    """``count`` copies of reset ``options``: an env that changes its options (``pop``) must not
    change another's, as it cannot when each env runs in its own process."""
    if options is None:
        return [None] * count
    try:
        return [copy.deepcopy(options) for _ in range(count)]
    except Exception:  # options that cannot be copied (a lock, say): shared, as given
        return [options] * count


def _failed_resets_beside(commands: Mapping[int, tuple[str, Any]] | list[tuple[str, Any]], results: Mapping[int, Any]) -> str:
    """What to add to the error of a failed env about same-step autoresets that failed in the same
    call (they would otherwise go unreported): ``""`` when none did."""
    failed = [
        f"env {index}'s same-step autoreset raised {result[1].failure[0]}: {result[1].failure[1]}"
        for index, result in sorted(results.items())
        if commands[index][0] == "step_reset" and isinstance(result[1], ResetFailure)
    ]
    return f"; {'; '.join(failed)}, too" if failed else ""


def _masks_of(obs: Mapping[AgentID, Any]) -> dict[AgentID, np.ndarray | SlotMasks]:
    masks = {agent_id: action_masks_of(observation) for agent_id, observation in obs.items()}
    return {agent_id: mask for agent_id, mask in masks.items() if mask is not None}



# Batched helpers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyBatch:
    """The observations of every agent mapped to one policy, across all envs.

    Attributes:
        keys: ``(env_index, agent_id)`` of each row, ordered by env index, then by the order of
            the agents in that env's observation dict.
        obs: the observations stacked leaf-wise (see :func:`stack`), one row per key (a list of
            the observations themselves for the ``unstacked`` policies of :func:`gather`).
    """

    keys: list[tuple[int, AgentID]]
    obs: Any

    def __len__(self) -> int:
        return len(self.keys)


def stack(observations: Sequence[Any]) -> Any:
    """Stack observations leaf-wise: arrays (and scalars) along a new first axis, Dict
    observations key by key into a dict of arrays, Tuple observations into a tuple of arrays.

    Example:
        >>> batch = stack([{"x": 1, "m": (0.5, 2)}, {"x": 3, "m": (1.5, 4)}])
        >>> batch["x"], batch["m"]
        (array([1, 3]), (array([0.5, 1.5]), array([2, 4])))

    Raises:
        SpaceError: no observations, or observations whose structure or shapes differ.
    """
    if len(observations) == 0:
        raise SpaceError("stack() needs at least one observation")
    first = observations[0]
    if isinstance(first, Mapping):
        keys = first.keys()
        for row, observation in enumerate(observations):
            if not (type(observation) is dict or isinstance(observation, Mapping)) or observation.keys() != keys:
                raise SpaceError(f"stack(): row {row} is {_describe(observation)}, row 0 a dict with keys {list(keys)}")
        return {key: stack([observation[key] for observation in observations]) for key in keys}
    if isinstance(first, tuple):
        for row, observation in enumerate(observations):
            if not isinstance(observation, tuple) or len(observation) != len(first):
                raise SpaceError(f"stack(): row {row} is {_describe(observation)}, row 0 a tuple of {len(first)}")
        return tuple(stack([observation[i] for observation in observations]) for i in range(len(first)))
    try:
        batch = np.asarray(observations)  # one call: much faster than np.stack for small rows
    except ValueError as error:
        raise _shapes_differ(observations) from error
    if batch.dtype.kind in "US":  # strings: numpy turns numbers beside them into strings too
        odd = next((row for row, observation in enumerate(observations) if not isinstance(observation, str)), None)
        if odd is not None and any(isinstance(observation, str) for observation in observations):
            text = next(row for row, observation in enumerate(observations) if isinstance(observation, str))
            raise SpaceError(f"stack(): row {odd} is {_describe(observations[odd])}, row {text} a str; "
                             "strings and other values cannot be stacked together")
    if batch.dtype != object:
        return batch
    for row, observation in enumerate(observations):  # a dict, tuple or None beside plain values
        if observation is None or isinstance(observation, (Mapping, tuple)):
            beside = f", row 0 {_describe(first)}" if row else ", which cannot be stacked"
            raise SpaceError(f"stack(): row {row} is {_describe(observation)}{beside}")
    try:  # objects, or rows that are lists of different lengths: stack row by row
        return np.stack([np.asarray(observation) for observation in observations])
    except ValueError as error:
        raise _shapes_differ(observations) from error


def _describe(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, Mapping):
        return f"a dict with keys {list(value)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return a_type(value)


def _shapes_differ(observations: Sequence[Any]) -> SpaceError:
    shapes = ", ".join(sorted({_shape_text(observation) for observation in observations}))
    return SpaceError(f"stack(): observations of different shapes [{shapes}] cannot be stacked")


def _shape_text(observation: Any) -> str:
    """The shape of ``observation`` as numpy reads it, or what it is when numpy cannot read one
    (a list of parts of different shapes: a Tuple observation sent as a list, say)."""
    try:
        return str(np.shape(observation))
    except ValueError:
        return f"{a_type(observation)} of {len(observation)} parts of different shapes"


def _close_envs(envs: list[MultiAgentEnv]) -> None:
    """Close each env of a sync vector; one that raises is logged, and the others still close."""
    for index, env in enumerate(envs):
        try:
            env.close()
        except Exception:
            logger.warning("env %d raised in close()", index, exc_info=True)


def gather(
    obs_list: Sequence[Mapping[AgentID, Any]],
    policy_of: Callable[[int, AgentID], str],
    where: Callable[[int, AgentID], bool] | None = None,
    *,
    unstacked: Container[str] = (),
) -> dict[str, PolicyBatch]:
    """Group the observations of all envs by policy and stack each group into one batch.

    Args:
        obs_list: one observation dict per env (as returned by :class:`VectorMultiAgentEnv`).
        policy_of: ``policy_of(env_index, agent_id)`` names the policy of an agent.
        where: optional filter; rows for which ``where(env_index, agent_id)`` is False are left
            out. Nothing is skipped otherwise: to batch only the agents that must act, pass
            ``where=lambda i, a: a in acting[i]`` with the vector's :attr:`~VectorMultiAgentEnv.acting`
            (agents whose final observation arrives in this step are in ``obs_list`` but do not act).
            With ``autoreset_mode="same_step"``, an env whose episode ended in the step holds its
            final observations in ``obs_list`` while ``acting`` already names the new episode's
            agents (the same ids, often): put ``reset_results[i][0]`` in place of ``obs_list[i]``
            where :attr:`~VectorMultiAgentEnv.reset_results` has an entry, before gathering.
        unstacked: policies whose batches keep their observations as a list, one per row, not
            stacked (for policies that act row by row, e.g. fixed callables: no stacking cost).

    Returns:
        One :class:`PolicyBatch` per policy, in order of first appearance.
    """
    rows: dict[str, tuple[list[tuple[int, AgentID]], list[Any]]] = {}
    for env_index, obs in enumerate(obs_list):
        for agent_id, observation in obs.items():
            if where is not None and not where(env_index, agent_id):
                continue
            keys, observations = rows.setdefault(policy_of(env_index, agent_id), ([], []))
            keys.append((env_index, agent_id))
            observations.append(observation)
    return {policy: PolicyBatch(keys, observations if policy in unstacked else _stacked(policy, keys, observations))
            for policy, (keys, observations) in rows.items()}


def _stacked(policy: str, keys: list[tuple[int, AgentID]], observations: list[Any]) -> Any:
    """:func:`stack` for :func:`gather`: its error names the policy and the (env, agent) rows."""
    try:
        return stack(observations)
    except SpaceError as error:
        rows = ", ".join(f"{row}: env {env_index} agent {agent_id!r}" for row, (env_index, agent_id) in enumerate(keys[:8]))
        more = f", ... ({len(keys)} rows)" if len(keys) > 8 else ""
        raise SpaceError(f"gather(): the observations of policy {policy!r} cannot be stacked (rows {rows}{more}): "
                         f"{error}") from error


def scatter(
    actions: Mapping[str, Sequence[Any] | np.ndarray],
    batches: Mapping[str, PolicyBatch],
    num_envs: int,
) -> list[dict[AgentID, Any]]:
    """Turn per-policy batched actions back into one action dict per env.

    Args:
        actions: per policy, one action per row of its batch: a list of actions, an array whose
            first axis is the row, or (Dict and Tuple action spaces) a dict or tuple of such
            arrays, leaf-wise as :func:`stack` builds them. Array rows are copied out.
        batches: the batches from :func:`gather` that the actions answer.
        num_envs: how many action dicts to return (envs without rows get ``{}``).

    Raises:
        VectorEnvError: a policy without actions or without a batch, or a row count mismatch.
    """
    if set(actions) != set(batches):
        raise VectorEnvError(f"scatter(): actions for policies {sorted(actions)} but batches for {sorted(batches)}")
    out: list[dict[AgentID, Any]] = [{} for _ in range(num_envs)]
    for policy, batch in batches.items():
        rows = _unstack(actions[policy], len(batch), policy)
        for (env_index, agent_id), action in zip(batch.keys, rows, strict=True):
            if not 0 <= env_index < num_envs:
                raise VectorEnvError(f"scatter(): row for env {env_index} but num_envs is {num_envs}", env_index)
            out[env_index][agent_id] = action
    return out


def _unstack(batched: Any, count: int, policy: str) -> list[Any]:
    if type(batched) is list:  # the common case first
        if len(batched) != count:
            raise VectorEnvError(f"scatter(): {len(batched)} actions for policy {policy!r} but its batch has {count} rows")
        return batched
    if isinstance(batched, Mapping):
        columns = {key: _unstack(value, count, policy) for key, value in batched.items()}
        return [{key: column[row] for key, column in columns.items()} for row in range(count)]
    if isinstance(batched, tuple):
        columns_t = [_unstack(value, count, policy) for value in batched]
        return [tuple(column[row] for column in columns_t) for row in range(count)]
    if not hasattr(batched, "__len__") or (isinstance(batched, np.ndarray) and batched.ndim == 0):
        raise VectorEnvError(f"scatter(): the actions of policy {policy!r} must be a list of {count}, an array with "
                             f"{count} rows, or a dict or tuple of such (Dict and Tuple action spaces); received "
                             f"{a_type(batched)} ({batched!r})")
    if len(batched) != count:
        raise VectorEnvError(f"scatter(): {len(batched)} actions for policy {policy!r} but its batch has {count} rows")
    if isinstance(batched, np.ndarray):
        if batched.ndim > 1:
            return [batched[row].copy() for row in range(count)]
        if batched.dtype.kind == "f":  # a shape-() Box per row: it holds 0-d arrays, not numpy scalars
            return [batched[row, ...].copy() for row in range(count)]
        return [batched[row] for row in range(count)]
    return list(batched)
