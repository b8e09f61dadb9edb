"""The worker processes of :class:`marl_core.vector.VectorMultiAgentEnv` in ``"async"`` mode.

Each worker process builds its envs from their cloudpickled factories and runs the commands it
receives (``step``, ``reset``, ``spaces``, ``call``, ``rebuild``) through :func:`execute`, the
same code that ``"sync"`` mode runs in-process. This module is internal to the vector.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import shared_memory
from typing import Any

import cloudpickle

from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import EnvContractError, VectorEnvError

logger = logging.getLogger(__name__)

class ResetFailure:
    """What a same-step autoreset returns in place of ``(obs, infos)`` when the reset raised."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def rebuild(envs: list[MultiAgentEnv], local: int, factory: Callable[[], MultiAgentEnv],
            seed_and_options: tuple[int | None, dict[str, Any] | None]) -> Any:
    """Close ``envs[local]`` (best effort), replace it by a new env from ``factory`` and reset it
    with ``(seed, options)``; return the reset's ``(obs, infos)``."""
    seed, options = seed_and_options
    try:
        envs[local].close()
    except Exception:
        logger.debug("closing a failed env raised", exc_info=True)
    envs[local] = factory()
    return checked_reset(envs[local], envs[local].reset(seed=seed, options=options))


def _is_dict(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _all_plain_dicts(result: tuple) -> bool:
    obs, rewards, terminateds, truncateds, infos = result
    return (type(obs) is dict and type(rewards) is dict and type(terminateds) is dict
            and type(truncateds) is dict and type(infos) is dict)


def _shape(result: Any) -> str:
    if isinstance(result, (tuple, list)):
        return f"a {type(result).__name__} of {len(result)} ({', '.join(type(part).__name__ for part in result)})"
    return f"a {type(result).__name__}"


def checked_reset(env: MultiAgentEnv, result: Any) -> Any:
    """``result`` of ``env.reset()`` if it is ``(obs, infos)`` with someone to act; else raise."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and _is_dict(result[0]) and _is_dict(result[1])):
        raise EnvContractError(f"{type(env).__name__}.reset() returned {_shape(result)}; expected (obs, infos), "
                               "two dicts keyed by agent id")
    if not result[0]:
        raise EnvContractError(f"{type(env).__name__}.reset() asked no agent to act (empty obs dict)")
    return result


def checked_step(env: MultiAgentEnv, result: Any) -> Any:
    """``result`` of ``env.step()`` if it is the five dicts, with ``"__all__"`` in terminateds and
    someone to act when the episode goes on; else raise (an env that breaks these would be
    stepped with empty action dicts forever)."""
    if not (isinstance(result, (tuple, list)) and len(result) == 5 and (  # named tuples and lists work too
            _all_plain_dicts(result) or all(map(_is_dict, result)))):
        raise EnvContractError(f"{type(env).__name__}.step() returned {_shape(result)}; expected (obs, rewards, "
                               "terminateds, truncateds, infos), five dicts keyed by agent id")
    obs, _, terminateds, truncateds, _ = result
    if ALL not in terminateds:
        raise EnvContractError(f"{type(env).__name__}.step() returned terminateds without '__all__' (keys: "
                               f"{list(terminateds)}); '__all__' says whether the episode ended")
    if not (terminateds[ALL] or truncateds.get(ALL, False)):
        for agent_id in obs:
            if not (terminateds.get(agent_id) or truncateds.get(agent_id)):
                return result
        raise EnvContractError(
            f"{type(env).__name__}.step() asks no agent to act and does not end the episode (its obs dict "
            f"holds {list(obs)}, '__all__' is False); set '__all__' when the last agent ends")
    return result


def execute(env: MultiAgentEnv, command: str, payload: Any) -> Any:
    """Run one command on ``env``: the same code in sync mode and in a worker process."""
    if command == "step":
        return checked_step(env, env.step(payload))
    if command in ("step_reset", "step_reset_isolated"):  # same-step autoreset: the step, then a reset if it ended
        result = checked_step(env, env.step(payload))
        if not (result[2][ALL] or result[3].get(ALL, False)):
            return result, None
        if command == "step_reset":
            return result, checked_reset(env, env.reset(seed=None, options=None))
        try:  # isolated (on_error="rebuild"): the ended episode's results must not be lost with the reset
            return result, checked_reset(env, env.reset(seed=None, options=None))
        except Exception:
            return result, ResetFailure(traceback.format_exc())
    if command == "reset":
        seed, options = payload
        return checked_reset(env, env.reset(seed=seed, options=options))
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
    """Send ``obj``; its array buffers go into ``shm`` when given and large enough. Nothing is
    sent when ``obj`` cannot be pickled."""
    _transmit(conn, _encode(obj, shm))


_Encoded = tuple[bytes, list[memoryview]]


def _encode(obj: Any, shm: shared_memory.SharedMemory | None = None) -> _Encoded:
    """``obj`` as one message (its large array buffers copied into ``shm`` when they fit) and
    the buffers that go through the pipe after it."""
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
    return pickle.dumps((payload, sizes, offsets), protocol=5), raws if offsets is None else []


def _transmit(conn: Any, encoded: _Encoded) -> None:
    header, raws = encoded
    conn.send_bytes(header)
    for raw in raws:
        conn.send_bytes(raw)


class Undecodable(Exception):
    """A whole message arrived, but its contents do not unpickle here (the pipe stays in step)."""


def _recv(conn: Any, shm: shared_memory.SharedMemory | None = None) -> tuple[Any, int]:
    """Receive one message; also return how many array bytes came through the pipe.

    Raises:
        Undecodable: from the error unpickling the message's contents (a class its sender could
            import and this process cannot, say), once all of it is read.
    """
    payload, sizes, offsets = pickle.loads(conn.recv_bytes())
    if offsets is not None and shm is not None:
        buffers = [bytearray(shm.buf[o : o + n]) for o, n in zip(offsets, sizes, strict=True)]
        piped = 0
    else:
        buffers = [bytearray(size) for size in sizes]
        for buffer in buffers:
            conn.recv_bytes_into(buffer)
        piped = sum(sizes)
    try:
        return pickle.loads(payload, buffers=buffers), piped
    except Exception as error:
        raise Undecodable() from error


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
    factories: list[Callable[[], MultiAgentEnv]] = []
    shm: shared_memory.SharedMemory | None = None
    parent_gone = False
    try:
        try:
            for env_fn in env_fns:
                factories.append(cloudpickle.loads(env_fn))
                envs.append(factories[-1]())
        except Exception as error:  # a factory raised
            _send(conn, ("error", (first + len(envs), failure_of(error))))
            return
        reply: list[tuple[str, Any]] | tuple[str, None] = ("ok", None)
        while True:
            try:
                _send(conn, reply, shm)
            except (OSError, EOFError):
                raise  # the parent is gone
            except Exception:  # a result that cannot be pickled (nothing was sent): say which
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
                    if command == "rebuild":
                        reply.append(("ok", rebuild(envs, local, factories[local], payload)))
                    else:
                        reply.append(("ok", execute(envs[local], command, payload)))
                except Exception as error:
                    reply.append(("error", failure_of(error)))
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
        return ("error", failure_of(error))


def remote_error(what: str, index: int, failure: tuple, suffix: str = "") -> VectorEnvError:
    type_name, message, remote_traceback, _ = failure
    text = f"{what} {type_name}: {message}{suffix}\n\nTraceback in its worker process:\n{remote_traceback}"
    return VectorEnvError(text, index, remote_traceback)


class UnsendableError(VectorEnvError):
    """A command whose payload cannot be pickled for its worker; nothing was sent to any worker."""


def failure_of(error: BaseException) -> tuple[str, str, str, BaseException | None]:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        pickle.loads(pickle.dumps(error))
        exception: BaseException | None = error
    except Exception:
        exception = None
    return type(error).__name__, str(error), text, exception


class Workers:
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
            ctx.set_forkserver_preload(["__main__", "marl_core.vector", "marl_core._vector_workers"])
        bounds = [len(env_fns) * w // num_workers for w in range(num_workers + 1)]
        self.envs_of = [range(bounds[w], bounds[w + 1]) for w in range(num_workers)]
        self.worker_of = [w for w, envs in enumerate(self.envs_of) for _ in envs]
        self.processes: list[Any] = []
        self.conns: list[Any] = []
        self.shms: list[shared_memory.SharedMemory | None] = [None] * num_workers
        self._new_shm: list[str | None] = [None] * num_workers
        self._stopped = self._no_shm = False
        self.stopped_because: str | None = None  # why the workers were stopped before close()
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
            if status == "dead":  # before its first reply
                hint = "" if context == "fork" else (
                    f"; a likely cause: with the {context!r} start method every worker imports the main module, so "
                    "a script that builds an async vector must guard its entry point with "
                    "`if __name__ == \"__main__\":` (the worker's own error, if it printed one, is above)"
                )
                raise VectorEnvError(f"{reply} while starting{hint}", self.envs_of[worker].start)
            if status == "undecodable":  # the factory's error, of a class this process cannot import
                raise remote_error(f"env {self.envs_of[worker].start}: its worker failed to start:",
                                   self.envs_of[worker].start, reply)
            index, failure = reply
            raise remote_error(f"env {index}: its factory raised", index, failure) from failure[3]

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def request(self, commands: Mapping[int, tuple[str, Any]]) -> dict[int, tuple[str, Any]]:
        """Send every command, then wait for every reply: per env ``(status, result)``."""
        batches: dict[int, list[tuple[int, str, Any]]] = {}
        for index, (command, payload) in commands.items():
            worker = self.worker_of[index]
            batches.setdefault(worker, []).append((index - self.envs_of[worker].start, command, payload))
        encoded = {worker: self._encode_batch(worker, batch) for worker, batch in batches.items()}
        try:
            replies: dict[int, tuple[str, Any]] = {}
            sent = []
            for worker, batch in batches.items():
                try:
                    _transmit(self.conns[worker], encoded[worker])
                    self._new_shm[worker] = None
                    sent.append(worker)
                except (OSError, EOFError):
                    replies.update(self._all_dead(worker, batch))
            for worker in sent:
                status, reply = self._receive(worker)
                if status == "dead":
                    replies.update(self._all_dead(worker, batches[worker], reply))
                elif status == "undecodable":
                    start = self.envs_of[worker].start
                    replies.update({start + local: ("error", reply) for local, _, _ in batches[worker]})
                else:
                    for (local, _, _), item in zip(batches[worker], reply, strict=True):
                        replies[self.envs_of[worker].start + local] = item
            return replies
        except BaseException as error:  # e.g. KeyboardInterrupt: the pipes are out of step now
            self.stopped_because = (f"a call was interrupted by {type(error).__name__}, so its worker processes "
                                     "were stopped")
            self.shutdown()
            raise

    def _encode_batch(self, worker: int, batch: list[tuple[int, str, Any]]) -> _Encoded:
        """The message of ``batch`` for ``worker``; an :class:`UnsendableError` naming the env
        whose payload cannot be pickled (before anything is sent to any worker)."""
        try:
            return _encode((batch, self._new_shm[worker]))
        except Exception:
            for local, command, payload in batch:
                try:
                    pickle.dumps(payload, protocol=5)
                except Exception as error:
                    index = self.envs_of[worker].start + local
                    what = "action dict" if command.startswith("step") else f"{command} arguments"
                    raise UnsendableError(
                        f"env {index}: its {what} cannot be sent to its worker process ({type(error).__name__}: "
                        f"{error}); nothing was sent to any env", index
                    ) from error
            raise

    def _all_dead(self, worker: int, batch: list, message: str | None = None) -> dict[int, tuple[str, Any]]:
        message = message or self._dead(worker)
        return {self.envs_of[worker].start + local: ("dead", message) for local, _, _ in batch}

    def _receive(self, worker: int) -> tuple[str, Any]:
        try:
            reply, piped = _recv(self.conns[worker], self.shms[worker])
        except (OSError, EOFError):
            return ("dead", self._dead(worker))
        except Undecodable as undecodable:
            error = undecodable.__cause__
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            return ("undecodable", (type(error).__name__, f"its results cannot be unpickled in this process: {error}",
                                    text, None))
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
        if self.stopped_because is not None:
            return self.stopped_because
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

