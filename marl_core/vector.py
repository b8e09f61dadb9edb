"""Vectorized multi-agent envs: :class:`VectorMultiAgentEnv` steps N MultiAgentEnvs at once.

``mode="sync"`` steps the envs one after the other in this process; ``mode="async"`` steps them
in parallel in worker processes, one per env by default (``forkserver`` where available, else
``spawn``; never ``fork``, which Ray and torch do not survive). Both give identical results.

:func:`gather` stacks, per policy, the observations of its agents across all envs so that one
forward pass serves them all; :func:`scatter` sends the batched actions back as action dicts.

Example:
    >>> from marl_core.vector import VectorMultiAgentEnv, gather, scatter
    >>> from examples.rock_paper_scissors import RockPaperScissors
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

import contextlib
import logging
import multiprocessing
import pickle
import signal
import time
import traceback
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any, Literal

import cloudpickle
import gymnasium as gym
import numpy as np

from marl_core.env import ALL, AgentID, MultiAgentEnv
from marl_core.errors import (
    MissingActionError,
    MultiAgentEnvError,
    ResetNeededError,
    SpaceError,
    UnexpectedActionError,
    VectorEnvError,
)
from marl_core.spaces import action_mask_of, check_action

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
            masked Discrete actions, legal. A bad dict then raises with nothing stepped.
        context: the multiprocessing start method of ``"async"`` mode (default: ``"forkserver"``
            where available, else ``"spawn"``).

    Semantics:
        - ``reset(seed=s)`` resets env ``i`` with ``seed=s + i`` (``None`` stays ``None``) and
          returns ``(obs_list, infos_list)``, one dict per env.
        - ``step(action_list)`` takes one action dict per env and returns ``(obs_list,
          rewards_list, terminateds_list, truncateds_list, infos_list)``: whatever each env
          returned, untouched. Rewards, dead agents, ``"__all__"``, chance and action masks are
          the sub-envs' own (see DESIGN.md).
        - **Autoreset:** an env whose episode ended (``"__all__"`` in its terminateds or
          truncateds) is reset on the next ``step()``: its action dict in that call is ignored
          (it may be empty), and its entries are the new episode's first observations and infos,
          with rewards ``{}`` and ``{"__all__": False}`` terminateds and truncateds.
          :attr:`autoreset` tells which envs were reset by the last ``step()``. An autoreset
          passes ``seed=None``, so each env's RNG continues from its seeded state and seeded
          runs repeat exactly.
        - :attr:`acting` lists, per env, the agents that must send an action to the next
          ``step()`` (empty for an env that will be reset).
        - Errors: bad input raises :class:`~marl_core.errors.VectorEnvError` naming the env,
          before any env steps. An exception inside a sub-env comes back as a ``VectorEnvError``
          with the env index and, in ``"async"`` mode, the worker's traceback; the vector then
          needs ``reset()``. A worker that dies makes the vector unusable except for ``close()``.
        - ``close()`` (idempotent; also on leaving a ``with`` block, on garbage collection and at
          interpreter exit) stops every worker process. Workers also exit by themselves when
          this process dies.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], MultiAgentEnv]],
        mode: Literal["sync", "async"] = "sync",
        *,
        num_workers: int | None = None,
        check_actions: bool = True,
        context: str | None = None,
    ) -> None:
        if mode not in ("sync", "async"):
            raise VectorEnvError(f"mode must be 'sync' or 'async', received {mode!r}")
        if len(env_fns) == 0:
            raise VectorEnvError("env_fns is empty: a vector needs at least one env factory")
        if mode == "sync" and (num_workers is not None or context is not None):
            raise VectorEnvError("num_workers and context apply to mode='async' only")
        self.mode = mode
        self.num_envs = len(env_fns)
        self.check_actions = check_actions
        self.autoreset: list[bool] = [False] * self.num_envs
        self.acting: list[list[AgentID]] = [[] for _ in range(self.num_envs)]
        self._needs_reset = [True] * self.num_envs
        self._masks: list[dict[AgentID, np.ndarray]] = [{} for _ in range(self.num_envs)]
        self._action_spaces: list[dict[AgentID, gym.Space]] = [{} for _ in range(self.num_envs)]
        self._observation_spaces: dict[AgentID, gym.Space] = {}
        self._was_reset = False
        self._broken: str | None = None
        self._closed = False
        self._envs: list[MultiAgentEnv] = []
        self._workers: _Workers | None = None
        if mode == "sync":
            for index, env_fn in enumerate(env_fns):
                try:
                    self._envs.append(env_fn())
                except Exception as error:
                    message = f"env {index}: its factory raised {type(error).__name__}: {error}"
                    raise VectorEnvError(message, index) from error
        else:
            workers = self.num_envs if num_workers is None else num_workers
            if not 1 <= workers <= self.num_envs:
                raise VectorEnvError(f"num_workers must be between 1 and {self.num_envs} (the number of envs), received {num_workers}")
            self._workers = _Workers(env_fns, workers, context)
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
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[AgentID, Any]], list[dict[AgentID, Any]]]:
        """Reset every env, env ``i`` with ``seed + i``; return ``(obs_list, infos_list)``."""
        self._check_usable()
        commands = [("reset", (None if seed is None else seed + i, options)) for i in range(self.num_envs)]
        results = self._run_all(commands)
        obs_list = [obs for obs, _ in results]
        for index, obs in enumerate(obs_list):
            self._started(index, obs)
        self.autoreset = [False] * self.num_envs
        self._was_reset = True
        return obs_list, [infos for _, infos in results]

    def step(self, action_list: Sequence[Mapping[AgentID, Any]]) -> _Result:
        """Step every env with its action dict (autoresetting ended envs); see the class doc."""
        self._check_usable()
        if not self._was_reset:
            raise ResetNeededError("VectorMultiAgentEnv.step() called before reset()")
        if len(action_list) != self.num_envs:
            raise VectorEnvError(
                f"step() needs one action dict per env ({self.num_envs}), received {len(action_list)}"
            )
        commands: list[tuple[str, Any]] = []
        for index, actions in enumerate(action_list):
            if self._needs_reset[index]:
                commands.append(("reset", (None, None)))
                continue
            if self.check_actions:
                self._validate(index, actions)
            commands.append(("step", actions))
        results = self._run_all(commands)
        out: _Result = ([], [], [], [], [])
        for index, ((command, _), result) in enumerate(zip(commands, results, strict=True)):
            if command == "reset":
                obs, infos = result
                result = (obs, {}, {ALL: False}, {ALL: False}, infos)
                self._started(index, obs)
            else:
                self._stepped(index, *result[:4])
            for column, value in zip(out, result, strict=True):
                column.append(value)
        self.autoreset = [command == "reset" for command, _ in commands]
        return out

    def close(self) -> None:
        """Close every env and stop every worker process; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._workers is not None:
            self._finalizer()
            return
        for index, env in enumerate(self._envs):
            try:
                env.close()
            except Exception:
                logger.warning("env %d raised in close()", index, exc_info=True)

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
        if self._broken is not None:
            raise VectorEnvError(f"the VectorMultiAgentEnv is unusable: {self._broken}; create a new one")

    def _started(self, index: int, obs: Mapping[AgentID, Any]) -> None:
        self._needs_reset[index] = False
        self.acting[index] = list(obs)
        self._masks[index] = _masks_of(obs)

    def _stepped(self, index: int, obs: Mapping, rewards: Any, terminateds: Mapping, truncateds: Mapping) -> None:
        if terminateds.get(ALL, False) or truncateds.get(ALL, False):
            self._needs_reset[index] = True
            self.acting[index] = []
            self._masks[index] = {}
            return
        self.acting[index] = [a for a in obs if not (terminateds.get(a, False) or truncateds.get(a, False))]
        self._masks[index] = _masks_of(obs)

    def _validate(self, index: int, actions: Mapping[AgentID, Any]) -> None:
        acting = self.acting[index]
        try:
            if not isinstance(actions, Mapping):
                raise MultiAgentEnvError(f"a {type(actions).__name__} where a dict of actions was expected")
            acting_set = set(acting)
            unexpected = [a for a in actions if a not in acting_set]
            if unexpected:
                raise UnexpectedActionError(unexpected, acting)
            missing = [a for a in acting if a not in actions]
            if missing:
                raise MissingActionError(missing, list(actions))
            missing_spaces = [a for a in acting if a not in self._action_spaces[index]]
            if missing_spaces:
                self._action_spaces[index].update(self._call(index, "spaces", ("action", missing_spaces)))
            spaces_, masks = self._action_spaces[index], self._masks[index]
            for agent_id in acting:
                space, action, mask = spaces_[agent_id], actions[agent_id], masks.get(agent_id)
                if not _surely_valid(space, action, mask):
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
        return self._collect(self._workers.request({index: (command, payload)}))[index]

    def _run_all(self, commands: list[tuple[str, Any]]) -> list[Any]:
        try:
            if self._workers is None:
                return [self._sync_execute(i, command, payload) for i, (command, payload) in enumerate(commands)]
            replies = self._collect(self._workers.request(dict(enumerate(commands))))
            return [replies[index] for index in range(self.num_envs)]
        except VectorEnvError:
            self._needs_reset = [True] * self.num_envs
            self._was_reset = False
            raise

    def _sync_execute(self, index: int, command: str, payload: Any) -> Any:
        try:
            return _execute(self._envs[index], command, payload)
        except Exception as error:
            raise VectorEnvError(f"env {index} raised {type(error).__name__}: {error}", index) from error

    def _collect(self, replies: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """The results of ``replies``, or raise for the first env that failed."""
        failures = {i: reply for i, (status, reply) in replies.items() if status != "ok"}
        if not failures:
            return {i: reply for i, (_, reply) in replies.items()}
        index = min(failures)
        failure = failures[index]
        others = f" (envs {sorted(failures)} failed)" if len(failures) > 1 else ""
        if isinstance(failure, str):  # the worker process is gone
            self._broken = failure
            raise VectorEnvError(failure + others, index)
        raise _remote_error(f"env {index} raised", index, failure, others) from failure[3]


_INTEGERS = (int, np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16, np.uint32, np.uint64)


def _surely_valid(space: gym.Space, action: Any, mask: np.ndarray | None) -> bool:
    """A fast check of the common cases; False means "ask check_action", not "invalid"."""
    if type(space) is gym.spaces.Discrete:
        if type(action) not in _INTEGERS:
            return False
        offset = int(action) - int(space.start)
        return 0 <= offset < space.n and (mask is None or bool(mask[offset]))
    if type(space) is gym.spaces.Box:
        return (
            type(action) is np.ndarray
            and action.dtype == space.dtype
            and action.shape == space.shape
            and bool(((action >= space.low) & (action <= space.high)).all())
        )
    return False


def _masks_of(obs: Mapping[AgentID, Any]) -> dict[AgentID, np.ndarray]:
    masks = {agent_id: action_mask_of(observation) for agent_id, observation in obs.items()}
    return {agent_id: mask for agent_id, mask in masks.items() if mask is not None}


def _execute(env: MultiAgentEnv, command: str, payload: Any) -> Any:
    """Run one command on ``env``: the same code in sync mode and in a worker process."""
    if command == "step":
        return env.step(payload)
    if command == "reset":
        seed, options = payload
        return env.reset(seed=seed, options=options)
    if command == "spaces":
        kind, agent_ids = payload
        space_of = env.get_action_space if kind == "action" else env.get_observation_space
        return {agent_id: space_of(agent_id) for agent_id in agent_ids}
    if command == "call":
        name, args, kwargs = payload
        attribute = getattr(env, name)
        if callable(attribute):
            return attribute(*args, **kwargs)
        if args or kwargs:
            raise TypeError(f"{name!r} is an attribute, not a method; it takes no arguments")
        return attribute
    raise ValueError(f"unknown command {command!r}")


# Worker processes -------------------------------------------------------------------------
# Messages are pickled with protocol 5. Large arrays in a worker's replies go through a shared-
# memory block that this process owns (one per worker, grown on demand): one copy on each side.

_ALIGN = 64
_IN_BAND = 16 * 1024  # arrays smaller than this are copied into the pickle itself
_SHM_THRESHOLD = 64 * 1024  # replies with more array bytes than this move to shared memory


def _send(conn: Any, obj: Any, shm: shared_memory.SharedMemory | None = None) -> None:
    """Send ``obj``; its array buffers go into ``shm`` when given and large enough."""
    raws: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < _IN_BAND:
            return True  # small arrays stay inside the pickle
        raws.append(raw)
        return False

    payload = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    sizes = [raw.nbytes for raw in raws]
    offsets: list[int] | None = None
    if shm is not None and raws:
        offsets, end = [], 0
        for size in sizes:
            offsets.append(end)
            end = -(-(end + size) // _ALIGN) * _ALIGN
        if offsets[-1] + sizes[-1] <= shm.size:
            for raw, offset in zip(raws, offsets, strict=True):
                shm.buf[offset : offset + raw.nbytes] = raw
        else:
            offsets = None
    conn.send_bytes(pickle.dumps((payload, sizes, offsets), protocol=5))
    if offsets is None:
        for raw in raws:
            conn.send_bytes(raw)


def _recv(conn: Any, shm: shared_memory.SharedMemory | None = None) -> tuple[Any, int]:
    """Receive one message; also return how many array bytes came through the pipe."""
    payload, sizes, offsets = pickle.loads(conn.recv_bytes())
    if offsets is not None and shm is not None:
        buffers = [bytearray(shm.buf[o : o + n]) for o, n in zip(offsets, sizes, strict=True)]
        return pickle.loads(payload, buffers=buffers), 0
    buffers = [bytearray(size) for size in sizes]
    for buffer in buffers:
        conn.recv_bytes_into(buffer)
    return pickle.loads(payload, buffers=buffers), sum(sizes)


def _attach(name: str) -> shared_memory.SharedMemory:
    """Open the parent's block without taking over its cleanup.

    Before Python 3.13 an attach registers the block with the resource tracker, which worker
    processes share with their parent, so the registration is the parent's own and harmless.
    """
    try:
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
    except TypeError:
        return shared_memory.SharedMemory(name=name)


def _worker(first: int, conn: Any, env_fns: list[bytes]) -> None:
    """The loop of one worker process: build its envs (``first``, ``first + 1``, ...), then run
    the commands it receives until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes us
    envs: list[MultiAgentEnv] = []
    shm: shared_memory.SharedMemory | None = None
    parent_gone = False
    try:
        try:
            for env_fn in env_fns:
                envs.append(cloudpickle.loads(env_fn)())
        except Exception as error:  # a factory raised
            _send(conn, ("error", (first + len(envs), _failure(error))))
            return
        reply: list[tuple[str, Any]] | tuple[str, None] = ("ok", None)
        while True:
            try:
                _send(conn, reply, shm)
            except (pickle.PicklingError, TypeError, AttributeError):
                _send(conn, [_picklable(item) for item in reply], shm)
            try:
                (commands, shm_name), _ = _recv(conn)
            except (EOFError, OSError):
                parent_gone = True
                return
            if shm_name is not None:
                if shm is not None:
                    shm.close()
                shm = _attach(shm_name)
            if commands is None:
                return
            reply = []
            for local, command, payload in commands:
                try:
                    reply.append(("ok", _execute(envs[local], command, payload)))
                except Exception as error:
                    reply.append(("error", _failure(error)))
    except (EOFError, OSError):
        parent_gone = True
    finally:
        for local, env in enumerate(envs):
            try:
                env.close()
            except Exception:
                logger.warning("env %d raised in close()", first + local, exc_info=True)
        if shm is not None:
            shm.close()
            if parent_gone:  # nobody else will remove the block
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()
        conn.close()


def _picklable(item: tuple[str, Any]) -> tuple[str, Any]:
    """``item`` itself, or an error reply saying why it cannot be pickled."""
    try:
        pickle.dumps(item, protocol=5)
        return item
    except Exception as error:
        return ("error", _failure(error))


def _remote_error(what: str, index: int, failure: tuple, suffix: str = "") -> VectorEnvError:
    type_name, message, remote_traceback, _ = failure
    text = f"{what} {type_name}: {message}{suffix}\n\nTraceback in its worker process:\n{remote_traceback}"
    return VectorEnvError(text, index, remote_traceback)


def _failure(error: BaseException) -> tuple[str, str, str, BaseException | None]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        pickle.loads(pickle.dumps(error))
        exception: BaseException | None = error
    except Exception:
        exception = None
    return type(error).__name__, str(error), text, exception


class _Workers:
    """The worker processes of an async vector, their pipes and shared-memory blocks.

    Worker ``w`` runs the contiguous envs ``envs_of[w]``; each request sends every worker one
    message with its envs' commands and reads back one message with their replies.
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], MultiAgentEnv]], num_workers: int, context: str | None
    ) -> None:
        if context is None:
            context = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(context)
        if context == "forkserver":  # workers then start with numpy, gymnasium and this module loaded
            ctx.set_forkserver_preload(["__main__", "marl_core.vector"])
        bounds = [len(env_fns) * w // num_workers for w in range(num_workers + 1)]
        self.envs_of = [range(bounds[w], bounds[w + 1]) for w in range(num_workers)]
        self.worker_of = [w for w, envs in enumerate(self.envs_of) for _ in envs]
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        self.shms: list[shared_memory.SharedMemory | None] = [None] * num_workers
        self._new_shm: list[str | None] = [None] * num_workers
        self._stopped = self._no_shm = False
        pickled = []
        for index, env_fn in enumerate(env_fns):
            try:
                pickled.append(cloudpickle.dumps(env_fn))
            except Exception as error:
                raise VectorEnvError(
                    f"env {index}: its factory {env_fn!r} cannot be pickled for a worker process "
                    f"({type(error).__name__}: {error}); pass a picklable factory or use mode='sync'",
                    index,
                ) from error
        try:
            for worker, envs in enumerate(self.envs_of):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                process = ctx.Process(
                    target=_worker,
                    args=(envs.start, child_conn, [pickled[i] for i in envs]),
                    name=f"VectorMultiAgentEnv-worker-{worker}",
                    daemon=True,
                )
                process.start()
                child_conn.close()
                self.processes.append(process)
                self.conns.append(parent_conn)
            replies = [self._receive(worker) for worker in range(num_workers)]
        except BaseException:
            self.shutdown()
            raise
        for worker, (status, reply) in enumerate(replies):
            if status == "ok":
                continue
            self.shutdown()
            if status == "dead":
                raise VectorEnvError(reply, self.envs_of[worker].start)
            index, failure = reply
            raise _remote_error(f"env {index}: its factory raised", index, failure) from failure[3]

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def request(self, commands: Mapping[int, tuple[str, Any]]) -> dict[int, tuple[str, Any]]:
        """Send every command, then wait for every reply: per env ``(status, result)``."""
        batches: dict[int, list[tuple[int, str, Any]]] = {}
        for index, (command, payload) in commands.items():
            worker = self.worker_of[index]
            batches.setdefault(worker, []).append((index - self.envs_of[worker].start, command, payload))
        try:
            replies: dict[int, tuple[str, Any]] = {}
            sent = []
            for worker, batch in batches.items():
                try:
                    _send(self.conns[worker], (batch, self._new_shm[worker]))
                    self._new_shm[worker] = None
                    sent.append(worker)
                except (OSError, EOFError):
                    replies.update(self._all_dead(worker, batch))
            for worker in sent:
                status, reply = self._receive(worker)
                if status == "dead":
                    replies.update(self._all_dead(worker, batches[worker], reply))
                else:
                    for (local, _, _), item in zip(batches[worker], reply, strict=True):
                        replies[self.envs_of[worker].start + local] = item
            return replies
        except BaseException:  # e.g. KeyboardInterrupt: the pipes are out of step now
            self.shutdown()
            raise

    def _all_dead(self, worker: int, batch: list, message: str | None = None) -> dict[int, tuple[str, Any]]:
        message = message or self._dead(worker)
        return {self.envs_of[worker].start + local: ("dead", message) for local, _, _ in batch}

    def _receive(self, worker: int) -> tuple[str, Any]:
        try:
            reply, piped = _recv(self.conns[worker], self.shms[worker])
        except (OSError, EOFError):
            return ("dead", self._dead(worker))
        if piped > _SHM_THRESHOLD and not self._no_shm:
            self._grow(worker, 2 * piped)
        if isinstance(reply, list):
            return ("ok", reply)
        return reply

    def _grow(self, worker: int, size: int) -> None:
        old = self.shms[worker]
        try:
            self.shms[worker] = shared_memory.SharedMemory(create=True, size=max(size, 1 << 20))
        except OSError as error:  # e.g. /dev/shm is full: keep using the pipe
            logger.warning("no shared memory for worker %d (%s); replies go through its pipe", worker, error)
            self._no_shm = True
            return
        self._new_shm[worker] = self.shms[worker].name
        if old is not None:
            old.close()
            old.unlink()

    def _dead(self, worker: int) -> str:
        process = self.processes[worker]
        process.join(timeout=1.0)
        envs = self.envs_of[worker]
        which = f"env {envs.start}" if len(envs) == 1 else f"envs {envs.start}-{envs.stop - 1}"
        return f"the worker process of {which} (pid {process.pid}) exited unexpectedly with code {process.exitcode}"

    def shutdown(self) -> None:
        """Stop every worker: ask politely, then terminate, then kill. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for conn in self.conns:
            with contextlib.suppress(OSError, EOFError, ValueError):
                _send(conn, (None, None))
        deadline = time.monotonic() + 2.0
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            for stop in (process.terminate, process.kill):
                if process.is_alive():
                    logger.warning("worker %s did not stop; calling %s()", process.name, stop.__name__)
                    stop()
                    process.join(timeout=1.0)
        for conn in self.conns:
            conn.close()
        for shm in self.shms:
            if shm is not None:
                shm.close()
                with contextlib.suppress(FileNotFoundError):
                    shm.unlink()


# Batched helpers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyBatch:
    """The observations of every agent mapped to one policy, across all envs.

    Attributes:
        keys: ``(env_index, agent_id)`` of each row, ordered by env index, then by the order of
            the agents in that env's observation dict.
        obs: the observations stacked leaf-wise (see :func:`stack`), one row per key.
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
        keys = list(first)
        for row, observation in enumerate(observations):
            if not isinstance(observation, Mapping) or list(observation) != keys:
                raise SpaceError(f"stack(): row {row} is {_describe(observation)}, row 0 a dict with keys {keys}")
        return {key: stack([observation[key] for observation in observations]) for key in keys}
    if isinstance(first, tuple):
        for row, observation in enumerate(observations):
            if not isinstance(observation, tuple) or len(observation) != len(first):
                raise SpaceError(f"stack(): row {row} is {_describe(observation)}, row 0 a tuple of {len(first)}")
        return tuple(stack([observation[i] for observation in observations]) for i in range(len(first)))
    try:
        return np.stack([np.asarray(observation) for observation in observations])
    except ValueError as error:
        shapes = sorted({np.shape(observation) for observation in observations})
        raise SpaceError(f"stack(): observations of different shapes {shapes} cannot be stacked") from error


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"a dict with keys {list(value)}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def gather(
    obs_list: Sequence[Mapping[AgentID, Any]],
    policy_of: Callable[[int, AgentID], str],
    where: Callable[[int, AgentID], bool] | None = None,
) -> dict[str, PolicyBatch]:
    """Group the observations of all envs by policy and stack each group into one batch.

    Args:
        obs_list: one observation dict per env (as returned by :class:`VectorMultiAgentEnv`).
        policy_of: ``policy_of(env_index, agent_id)`` names the policy of an agent.
        where: optional filter; rows for which ``where(env_index, agent_id)`` is False are left
            out. Nothing is skipped otherwise: to batch only the agents that must act, pass
            ``where=lambda i, a: a in acting[i]`` with the vector's :attr:`~VectorMultiAgentEnv.acting`
            (agents whose final observation arrives in this step are in ``obs_list`` but do not act).

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
    return {policy: PolicyBatch(keys, stack(observations)) for policy, (keys, observations) in rows.items()}


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
    if isinstance(batched, Mapping):
        columns = {key: _unstack(value, count, policy) for key, value in batched.items()}
        return [{key: column[row] for key, column in columns.items()} for row in range(count)]
    if isinstance(batched, tuple):
        columns_t = [_unstack(value, count, policy) for value in batched]
        return [tuple(column[row] for column in columns_t) for row in range(count)]
    if len(batched) != count:
        raise VectorEnvError(f"scatter(): {len(batched)} actions for policy {policy!r} but its batch has {count} rows")
    if isinstance(batched, np.ndarray):
        return [batched[row].copy() if batched.ndim > 1 else batched[row] for row in range(count)]
    return list(batched)
