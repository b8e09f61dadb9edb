"""The worker processes of :class:`marl_core.vector.VectorMultiAgentEnv` in ``"async"`` mode.

Each worker process builds its envs from their cloudpickled factories and runs the commands it
receives (``step``, ``reset``, ``spaces``, ``call``, ``rebuild``) through :func:`execute`, the
same code that ``"sync"`` mode runs in-process. This module is internal to the vector.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing import shared_memory
from typing import Any

import cloudpickle

from marl_core.env import ALL, MultiAgentEnv
from marl_core.errors import EnvContractError, VectorEnvError, shape_of
from marl_core.spaces import snapshot

logger = logging.getLogger(__name__)


class ResetFailure:
    """What a same-step autoreset returns in place of ``(obs, infos)`` when the reset raised: in
    the process that ran the reset, the error itself; elsewhere (a worker sends it) the error's
    :func:`failure_of`, made when it is pickled."""

    __slots__ = ("_failure", "error")

    def __init__(self, error: Exception) -> None:
        self.error: Exception | None = error
        self._failure: Failure | None = None

    @property
    def failure(self) -> Failure:
        if self._failure is None:
            self._failure = failure_of(self.error)
        return self._failure

    @property
    def text(self) -> str:
        """The traceback, as text."""
        return self.failure[2] if self.error is None else _traceback_text(self.error)

    def __getstate__(self) -> tuple[Failure]:
        return (self.failure,)

    def __setstate__(self, state: tuple[Failure]) -> None:
        (self._failure,) = state
        self.error = None


class SharedEnvError(ValueError):
    """A factory returned an env that another env of the same vector already is."""


def build_env(factory: Callable[[], MultiAgentEnv], envs: list[MultiAgentEnv], local: int, first: int = 0) -> MultiAgentEnv:
    """A new env from ``factory`` for slot ``local`` of ``envs`` (env ``first + local``); a
    :class:`SharedEnvError` if it is the very object of another slot, which would be stepped twice."""
    env = factory()
    twin = next((first + i for i, other in enumerate(envs) if other is env and i != local), None)
    if twin is not None:
        raise SharedEnvError(f"returned the very env object of env {twin}; each env needs its own instance "
                             "(a factory that builds a new one)")
    return env


def rebuild(envs: list[MultiAgentEnv], local: int, factory: Callable[[], MultiAgentEnv],
            seed_and_options: tuple[int | None, dict[str, Any] | None], first: int = 0) -> Any:
    """Close ``envs[local]`` (best effort), replace it by a new env from ``factory`` and reset it
    with ``(seed, options)``; return the reset's ``(obs, infos)``. ``envs[0]`` is env ``first``."""
    seed, options = seed_and_options
    failed = envs[local]
    try:
        failed.close()
    except Exception:
        logger.debug("closing a failed env raised", exc_info=True)
    env = build_env(factory, envs, local, first)
    if env is failed:  # it would fail again, closed now, at every step
        raise SharedEnvError("returned the very env object that failed (closed now); a rebuild needs a new "
                             "instance (a factory that builds a new one)")
    envs[local] = env
    return checked_reset(env, env.reset(seed=seed, options=options))


def _is_dict(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _all_plain_dicts(result: tuple) -> bool:
    obs, rewards, terminateds, truncateds, infos = result
    return (type(obs) is dict and type(rewards) is dict and type(terminateds) is dict
            and type(truncateds) is dict and type(infos) is dict)


def checked_reset(env: MultiAgentEnv, result: Any) -> Any:
    """``result`` of ``env.reset()`` if it is ``(obs, infos)`` with someone to act; else raise."""
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and _is_dict(result[0]) and _is_dict(result[1])):
        raise EnvContractError(f"{type(env).__name__}.reset() returned {shape_of(result)}; expected (obs, infos), "
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
        raise EnvContractError(f"{type(env).__name__}.step() returned {shape_of(result)}; expected (obs, rewards, "
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
    if command == "step_reset":  # same-step autoreset: the step, then a reset if it ended
        result = checked_step(env, env.step(payload))
        if not (result[2][ALL] or result[3].get(ALL, False)):
            return result, None
        # The reset may write into the dicts and arrays the step returned (an env reusing its buffers).
        result = tuple(snapshot(part) for part in result)
        try:
            return result, checked_reset(env, env.reset(seed=None, options=None))
        except Exception as error:  # the ended episode's results go back too: the caller decides
            return result, ResetFailure(error)
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


def copied(command: str, result: Any) -> Any:
    """``result`` of ``command`` with copies of the dicts and arrays its env may change later (an
    env reusing its buffers): what a sync vector returns, as results reach an async one pickled."""
    if command in ("step", "reset", "rebuild"):
        return snapshot(result)
    if command == "step_reset":
        step_result, reset_result = result
        if reset_result is None:
            return snapshot(step_result), None
        if isinstance(reset_result, ResetFailure):  # the step's results were copied before the reset
            return result
        return step_result, snapshot(reset_result)
    return result


def own_actions(command: str, payload: Any) -> Any:
    """``payload`` with a copy of the actions a step sends: an env may keep them, and the caller
    change its arrays after the call (actions reach an async vector's envs pickled)."""
    return snapshot(payload) if command in ("step", "step_reset") else payload


def call_text(command: str, payload: Any) -> str:
    """The env call that ``command`` makes, as error messages name it: ``step()``, ``reset()``..."""
    if command == "step":
        return "step()"
    if command == "step_reset":
        return "step()"
    if command == "spaces":
        return f"get_{payload[0]}_space()"
    if command == "call":
        return f"call({payload[0]!r})"
    if command == "rebuild":
        return "its rebuild (its factory, then reset())"
    return f"{command}()"


# Worker processes -------------------------------------------------------------------------
# Messages are pickled with protocol 5. Large arrays in a worker's replies go through a shared-
# memory block that this process owns (one per worker, grown on demand): one copy on each side.

_ALIGN = 64
_IN_BAND = 16 * 1024  # arrays smaller than this are copied into the pickle itself
_SHM_THRESHOLD = 64 * 1024  # replies with more array bytes than this move to shared memory


# A message is a small head (what it is) and a list of items, pickled as one. When the receiver
# cannot unpickle them (a class only the sender can import), it asks for them again one by one
# ("resend"), so such an item costs its own env alone; one that cannot be pickled is sent apart
# at once. One pickle per message keeps the common case as fast as it can be.
_Encoded = tuple[bytes, list[memoryview]]
Failure = tuple[str, str, str, "bytes | None"]  # type name, message, traceback text, the pickled exception
RESEND = ("resend",)  # the head of a request to send the last message again, item by item


def _send(conn: Any, head: tuple, items: Sequence[Any] = (), shm: shared_memory.SharedMemory | None = None) -> None:
    """Send one message (see :func:`_encode`); nothing is sent when an item cannot be pickled."""
    _transmit(conn, _encode(head, items, shm))


def _encode(
    head: tuple,
    items: Sequence[Any],
    shm: shared_memory.SharedMemory | None = None,
    replace: Callable[[int, Any, Exception], Any] | None = None,
    one_by_one: bool = False,
) -> _Encoded:
    """``head`` and ``items`` as one message frame, and the array buffers that go through the
    pipe after it: large buffers go into ``shm`` when they fit.

    The items are pickled together, or ``one_by_one`` (so the receiver can unpickle each apart),
    as they also are when one of them cannot be pickled: ``replace(position, item, error)`` then
    gives what to send in its place (by default the error propagates, and nothing is sent).
    """
    raws: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < _IN_BAND:
            return True  # small arrays stay inside the pickle
        raws.append(raw)
        return False

    payloads: list[bytes] = []
    counts: list[int] | None = None
    if not one_by_one:
        try:
            together = items if type(items) is list else list(items)  # the receiver reads a list
            payloads.append(pickle.dumps(together, protocol=5, buffer_callback=out_of_band))
        except Exception:
            raws.clear()
            one_by_one = True
    if one_by_one:
        counts = []
        for position, item in enumerate(items):
            before = len(raws)
            try:
                payloads.append(pickle.dumps(item, protocol=5, buffer_callback=out_of_band))
            except Exception as error:
                del raws[before:]
                try:  # a class of the user's script (__main__): by value, as the factories were sent
                    payloads.append(cloudpickle.dumps(item, protocol=5, buffer_callback=out_of_band))
                except Exception:
                    del raws[before:]
                    if replace is None:
                        raise
                    payloads.append(pickle.dumps(replace(position, item, error), protocol=5))
            counts.append(len(raws) - before)
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
    frame = pickle.dumps((head, payloads, counts, sizes, offsets), protocol=5)
    return frame, raws if offsets is None else []


def _transmit(conn: Any, encoded: _Encoded) -> None:
    frame, raws = encoded
    conn.send_bytes(frame)
    for raw in raws:
        conn.send_bytes(raw)


class Undecodable:
    """An item of a message that does not unpickle in this process; the others do."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def failure(self, what: str, where: str) -> Failure:
        """The failure of the env the item was for: ``what`` (its results, its action dict)
        ``where`` (in this process) cannot be unpickled."""
        error = self.error
        return (type(error).__name__, f"{what} cannot be unpickled {where}: {error}", _traceback_text(error), None)


def _recv(conn: Any, shm: shared_memory.SharedMemory | None = None) -> tuple[tuple, Any, int]:
    """Receive one message: its head, its items and how many array bytes came through the pipe.

    The items are a list; items sent together that do not unpickle here are one
    :class:`Undecodable` (ask for them one by one: :data:`RESEND`), and an item sent alone that
    does not is an :class:`Undecodable` in its place.
    """
    head, payloads, counts, sizes, offsets = pickle.loads(conn.recv_bytes())
    if offsets is not None and shm is not None:
        buffers = [bytearray(shm.buf[o : o + n]) for o, n in zip(offsets, sizes, strict=True)]
        piped = 0
    else:
        buffers = [bytearray(size) for size in sizes]
        for buffer in buffers:
            conn.recv_bytes_into(buffer)
        piped = sum(sizes)
    if counts is None:
        try:
            return head, pickle.loads(payloads[0], buffers=buffers), piped
        except Exception as error:
            return head, Undecodable(error), piped
    items: list[Any] = []
    start = 0
    for payload, count in zip(payloads, counts, strict=True):
        try:
            items.append(pickle.loads(payload, buffers=buffers[start : start + count]))
        except Exception as error:
            items.append(Undecodable(error))
        start += count
    return head, items, piped


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
                envs.append(build_env(factories[-1], envs, len(envs), first))
        except Exception as error:  # a factory raised
            _send(conn, ("error", first + len(envs)), [failure_of(error)])
            return
        head: tuple = ("ok",)
        reply: list[tuple[str, Any]] = []
        one_by_one = False
        while True:
            # A result that cannot be pickled is that env's error; the others' results go as they are.
            _transmit(conn, _encode(head, reply, shm, replace=_unpicklable, one_by_one=one_by_one))
            try:
                message, payloads, _ = _recv(conn)
            except (EOFError, OSError):
                parent_gone = True
                return
            one_by_one = message == RESEND  # the parent could not unpickle the reply: again, item by item
            if one_by_one:
                continue
            if message[0] == "stop":
                return
            _, shm_name, commands = message
            if shm_name is not None:
                if shm is not None:
                    shm.close()
                shm = _attach(shm_name)
            if isinstance(payloads, Undecodable):  # ask for the commands one by one
                head, reply = RESEND, []
                continue
            head, reply = ("reply",), []
            for (local, command), payload in zip(commands, payloads, strict=True):
                if isinstance(payload, Undecodable):
                    reply.append(("error", payload.failure(f"its {_payload_name(command)}", "in its worker process")))
                    continue
                try:
                    if command == "rebuild":
                        reply.append(("ok", rebuild(envs, local, factories[local], payload, first)))
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


def _unpicklable(position: int, item: Any, error: Exception) -> tuple[str, Failure]:
    """The error reply that replaces a reply ``item`` that cannot be pickled."""
    return ("error", failure_of(error))


def _payload_name(command: str) -> str:
    return "action dict" if command.startswith("step") else f"{command} arguments"


def remote_error(what: str, index: int, failure: tuple, suffix: str = "", during: str = "") -> VectorEnvError:
    type_name, message, remote_traceback, _ = failure
    text = f"{what} {type_name}{during}: {message}{suffix}\n\nTraceback in its worker process:\n{remote_traceback}"
    return VectorEnvError(text, index, remote_traceback)


class UnsendableError(VectorEnvError):
    """A command whose payload cannot be pickled for its worker; nothing was sent to any worker."""


def failure_of(error: BaseException) -> Failure:
    """What the parent learns of an ``error`` in a worker: its type name, message and traceback as
    text, and the exception pickled apart (None if it cannot be), so a class the parent cannot
    import loses only the exception object."""
    try:
        blob: bytes | None = pickle.dumps(error)
        pickle.loads(blob)
    except Exception:
        blob = None
    return type(error).__name__, error_text(error), _traceback_text(error), blob


def error_text(error: BaseException) -> str:
    """``str(error)``, or what can be said of it when its ``__str__`` raises."""
    try:
        return str(error)
    except Exception as broken:
        return f"<its str() raised {type(broken).__name__}>"


def exception_of(failure: Failure) -> BaseException | None:
    """The exception of a :func:`failure_of`, when it unpickles here (else None)."""
    if failure[3] is None:
        return None
    try:
        return pickle.loads(failure[3])
    except Exception:
        return None


def _traceback_text(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:  # an exception whose __str__ raises, on Pythons whose traceback module lets that through
        return "".join(traceback.format_tb(error.__traceback__)) + f"{type(error).__name__}: {error_text(error)}\n"


def _reserve(shm: shared_memory.SharedMemory) -> None:
    """Allocate the pages of a new block now: a sparse block that /dev/shm has no room for kills
    the worker writing into it with SIGBUS; reserving them raises OSError (ENOSPC) here instead."""
    fd = getattr(shm, "_fd", -1)
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, shm.size)


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
            index, failure = reply
            raise remote_error(f"env {index}: its factory raised", index, failure) from exception_of(failure)

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
                if status == "resend":  # the worker could not unpickle the commands together
                    status, reply = self._ask_again(worker, self._encode_batch(worker, batches[worker], one_by_one=True))
                if status == "undecodable":  # nor this process the reply: again, item by item
                    status, reply = self._ask_again(worker, _encode(RESEND, ()))
                if status == "dead":
                    replies.update(self._all_dead(worker, batches[worker], reply))
                else:
                    for (local, _, _), item in zip(batches[worker], reply, strict=True):
                        replies[self.envs_of[worker].start + local] = item
            return replies
        except BaseException as error:  # e.g. KeyboardInterrupt: the pipes are out of step now
            self.stopped_because = (f"a call was interrupted by {type(error).__name__}, so its worker processes "
                                     "were stopped")
            self.shutdown()
            raise

    def _ask_again(self, worker: int, message: _Encoded) -> tuple[str, Any]:
        """Send ``message`` to ``worker`` and receive its answer (``("dead", why)`` if it is gone)."""
        try:
            _transmit(self.conns[worker], message)
        except (OSError, EOFError):
            return ("dead", self._dead(worker))
        return self._receive(worker)

    def _encode_batch(self, worker: int, batch: list[tuple[int, str, Any]], one_by_one: bool = False) -> _Encoded:
        """The message of ``batch`` for ``worker``; an :class:`UnsendableError` naming the env
        whose payload cannot be pickled (before anything is sent to any worker)."""
        start = self.envs_of[worker].start

        def unsendable(position: int, payload: Any, error: Exception) -> Any:
            local, command, _ = batch[position]
            raise UnsendableError(
                f"env {start + local}: its {_payload_name(command)} cannot be sent to its worker process "
                f"({type(error).__name__}: {error}); nothing was sent to any env", start + local
            ) from error

        head = ("commands", self._new_shm[worker], [(local, command) for local, command, _ in batch])
        return _encode(head, [payload for _, _, payload in batch], replace=unsendable, one_by_one=one_by_one)

    def _all_dead(self, worker: int, batch: list, message: str | None = None) -> dict[int, tuple[str, Any]]:
        message = message or self._dead(worker)
        return {self.envs_of[worker].start + local: ("dead", message) for local, _, _ in batch}

    def _receive(self, worker: int) -> tuple[str, Any]:
        """One message of ``worker``: ``("reply", items)`` (per env ``(status, result)``; an item
        that does not unpickle here is that env's error), ``("undecodable", None)`` when the items
        sent together do not unpickle (:data:`RESEND` asks for them one by one), ``("resend",
        None)`` when the worker asks for the commands one by one, ``("ok", None)`` or
        ``("error", (index, failure))`` when it has started or failed to, or ``("dead", why)``."""
        try:
            head, items, piped = _recv(self.conns[worker], self.shms[worker])
        except (OSError, EOFError):
            return ("dead", self._dead(worker))
        if piped > _SHM_THRESHOLD and not self._no_shm:
            self._grow(worker, 2 * piped)
        if head[0] in ("ok", "resend"):
            return (head[0], None)
        if head[0] == "error":
            return ("error", (head[1], items[0]))
        if isinstance(items, Undecodable):
            return ("undecodable", None)
        return ("reply", [("error", item.failure("its results", "in this process")) if isinstance(item, Undecodable)
                          else item for item in items])

    def _grow(self, worker: int, size: int) -> None:
        old = self.shms[worker]
        try:
            new = shared_memory.SharedMemory(create=True, size=max(size, 1 << 20))
        except OSError as error:  # e.g. /dev/shm is full: keep using the pipe
            logger.warning("no shared memory for worker %d (%s); replies go through its pipe", worker, error)
            self._no_shm = True
            return
        try:
            _reserve(new)
        except BaseException as error:
            new.close()
            new.unlink()
            if not isinstance(error, OSError):
                raise
            # Too little room left in /dev/shm (Docker gives it 64 MB): keep using the pipe.
            logger.warning("no room for %d bytes of shared memory for worker %d (%s); replies go through its pipe",
                           new.size, worker, error)
            self._no_shm = True
            return
        self.shms[worker] = new
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
                _send(conn, ("stop",))
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

