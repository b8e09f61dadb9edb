"""The env runner fleet: Ray actors sampling in parallel, replaced when they die.

Ray starts locally with the configured ``num_cpus`` when no address is given, or joins the cluster
at ``ray_address``. The local Ray is a lean one-machine head: no autoscaler monitor, no log
monitor (runner output is not forwarded anyway), no dashboard server, no idle workers started
ahead of the runners; that saves about 150 MB next to a plain ``ray.init()``. Policies and the
mapping fn travel cloudpickled, only to runners that have not seen the current version; weights
(numpy arrays) go through the object store once per iteration.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from marl_core.errors import ConfigError, EnvRunnerError

if TYPE_CHECKING:
    from marl_core.ppo.config import PPOConfig

logger = logging.getLogger(__name__)

# ray.wait takes its timeout in int64 milliseconds: longer timeouts are waited for in steps of this.
_LONGEST_WAIT_S = 3600.0
# How long a new runner may take to start (its process, imports, envs) when sample_timeout_s is
# set: its start does not count toward that timeout, but one that never starts must not hang the run.
RUNNER_START_TIMEOUT_S = 120.0

# The Ray this module started and how many runner groups use it: the last to stop shuts it down,
# so one trainer's stop() never pulls Ray from under another's runners.
_started_ray: dict[str, Any] = {"cluster": None, "users": 0, "generation": 0, "address": None}


# A gRPC server (Ray's GCS, and its client server for ray://) answers HTTP/2's client preface with
# a SETTINGS frame (type 4): a 9-byte frame header whose fourth byte is the type.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_PROBE_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """Raise a :class:`ConfigError` when nothing answers at a ``host:port`` (or ``ray://host:port``)
    Ray address, or what answers is not a gRPC server such as Ray's: ``ray.init`` would retry for
    minutes before saying so. Other forms ("auto") are Ray's; with ``RAY_USE_TLS`` set, only the
    connection is checked."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not (sep and host and port.isascii() and port.isdigit()):
        if address not in ("auto", "local") and "://" not in address:  # other schemes are Ray's to read
            raise ConfigError(f"ray_address must be 'host:port', 'ray://host:port', 'auto' or 'local', "
                              f"received {address!r}")
        return
    try:
        connection = socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S)
    except OSError as error:
        raise ConfigError(f"cannot reach a Ray cluster at ray_address={address!r}: {error}") from None
    with connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        header = b""
        with contextlib.suppress(OSError):  # a reset or a silent server: no answer
            connection.sendall(_HTTP2_PREFACE)
            while len(header) < 9 and (chunk := connection.recv(9 - len(header))):
                header += chunk
    if len(header) < 9 or header[3] != 0x04:
        raise ConfigError(
            f"ray_address={address!r}: something listens there, but it is not a Ray cluster (Ray's GCS, or its "
            f"client server for ray://, answers in gRPC; this answered {header[:9]!r} within {_PROBE_TIMEOUT_S:g} s); "
            "check the port (`ray status` on the head prints the address)"
        )


def _deadline(timeout: float | None) -> float:
    """When a call sent now with ``timeout`` is overdue (never: infinity)."""
    return math.inf if timeout is None else time.monotonic() + timeout


class RunnerGroup:
    """``num_runners`` :class:`~marl_core.ppo.rollout.EnvRunner` actors and their restarts.

    Ray is started here when it is not running (and shut down by the last group using it, so
    trainers in one process share it); a Ray the caller started stays up.
    """

    def __init__(self, env_creator: Callable[[dict], Any], env_config: dict, num_runners: int, num_envs: int,
                 *, seed: int | None, ray_address: str | None, num_cpus: int | None, max_restarts: int,
                 max_env_errors_in_a_row: int, log_level: str, vector_mode: str = "sync",
                 vector_num_workers: int | None = None, torch_threads: int = 1, stream: int = 0,
                 sample_timeout_s: float | None = None) -> None:
        import cloudpickle
        import ray

        from marl_core.ppo.rollout import EnvRunner

        _forget_a_ray_shut_down_under_us()
        # Ours to shut down when this module started it (for this group or another still running).
        self.owns_ray = not ray.is_initialized() or _started_ray["users"] > 0
        self.runners: list[Any] = []
        if ray.is_initialized() and ray_address:
            running_at = ray.get_runtime_context().gcs_address
            if not _may_be(ray_address, running_at):
                logger.warning("Ray is already running in this process (at %s): the runners start there; "
                               "ray_address=%r is used only by a trainer that starts Ray", running_at, ray_address)
        if not ray.is_initialized():
            if ray_address:
                _check_reachable(ray_address)
                ray.init(address=ray_address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                _started_ray["cluster"] = _start_local_ray(num_cpus)
            # A new Ray: groups of one shut down under them (ray.shutdown()) no longer count.
            _started_ray["users"], _started_ray["generation"] = 0, _started_ray["generation"] + 1
            _started_ray["address"] = ray.get_runtime_context().gcs_address
        self._generation = _started_ray["generation"]
        if self.owns_ray:
            _started_ray["users"] += 1
        try:
            total_cpus = float(ray.cluster_resources().get("CPU", 1.0))
            self.cpus_per_runner = min(1.0, total_cpus / num_runners)
            self._actor_class = ray.remote(num_cpus=self.cpus_per_runner, max_restarts=0)(EnvRunner)
            try:
                self._creator_blob = cloudpickle.dumps(env_creator)
            except Exception as error:  # a lock, a file handle, ... in the env's class or closure
                raise ConfigError(f"the env creator {env_creator!r} cannot be sent to env runners: it must pickle "
                                  f"(cloudpickle): {type(error).__name__}: {error}; build the env from a module-level "
                                  "class or function, or set num_env_runners=0") from error
            self._args = (env_config, num_envs)
            self._seed, self._max_env_errors, self._log_level = seed, max_env_errors_in_a_row, log_level
            self._vector = (vector_mode, vector_num_workers, torch_threads, stream)
            self.max_restarts = max_restarts
            self.sample_timeout_s = sample_timeout_s
            self._next_worker_index = 1
            self.runners = [self._make() for _ in range(num_runners)]
            self._starting = set(range(num_runners))  # runners not yet seen ready: their start is not sampling
            self.versions = [-1] * num_runners
            self.num_restarts = 0
        except BaseException:
            self.stop()  # the Ray it started, too
            raise

    @classmethod
    def for_config(cls, config: PPOConfig, env_creator: Callable[[dict], Any], *, stream: int = 0) -> RunnerGroup:
        """The ``config.num_env_runners`` runners of ``config``, each stepping envs of ``env_creator``
        on sampling stream ``stream`` (see :class:`~marl_core.ppo.rollout.Sampler`)."""
        return cls(env_creator, config.env_config, config.num_env_runners, config.num_envs_per_env_runner,
                   seed=config.seed, ray_address=config.ray_address, num_cpus=config.num_cpus,
                   max_restarts=config.max_runner_restarts, max_env_errors_in_a_row=config.max_env_errors_in_a_row,
                   log_level=config.log_level, vector_mode=config.vector_mode,
                   vector_num_workers=config.vector_num_workers, torch_threads=int(config.sampling_torch_threads),
                   stream=stream, sample_timeout_s=config.sample_timeout_s)

    def _make(self) -> Any:
        index = self._next_worker_index
        self._next_worker_index += 1
        return self._actor_class.remote(self._creator_blob, *self._args, index, self._seed,
                                        self._max_env_errors, self._log_level, *self._vector)

    def sample(self, version: int, state_blob: bytes, weights: dict, steps_per_runner: int) -> list[dict]:
        """One sample call on every runner; a runner that dies, or takes longer than
        ``sample_timeout_s`` to sample, is replaced and asked again (up to ``max_restarts`` times
        each). A new runner's start does not count toward ``sample_timeout_s``; with it set, a
        runner that has not started within ``max(sample_timeout_s, RUNNER_START_TIMEOUT_S)`` is
        replaced too."""
        import ray
        from ray.exceptions import RayActorError

        _forget_a_ray_shut_down_under_us()
        if not ray.is_initialized() or self._generation != _started_ray["generation"]:
            # ray.put would start a new Ray, without these runners (or use the user's own since)
            raise EnvRunnerError("Ray was shut down under this trainer's env runners (ray.shutdown() was called); "
                                 "build the trainer again")
        for index, runner in enumerate(self.runners):  # slots left empty by a failed or interrupted call
            if runner is None:
                self._renew(index)
        weights_ref = ray.put(weights)
        pending: dict[Any, tuple[int, float, bool]] = {}  # the call -> its runner, its deadline, whether a start
        timeout = self.sample_timeout_s
        start_timeout = None if timeout is None else max(timeout, RUNNER_START_TIMEOUT_S)

        def submit(index: int) -> None:
            if index in self._starting:  # its start first: the sampling clock runs from there
                pending[self.runners[index].ping.remote()] = (index, _deadline(start_timeout), True)
            else:
                pending[self._submit(index, version, state_blob, weights_ref, steps_per_runner)] = (
                    index, _deadline(timeout), False)

        restarts = [0] * len(self.runners)
        results: dict[int, dict] = {}
        try:
            for index in range(len(self.runners)):
                submit(index)
            while pending:
                first = min(deadline for _, deadline, _ in pending.values())
                wait = None if math.isinf(first) else min(_LONGEST_WAIT_S, max(0.0, first - time.monotonic()))
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
                if not ready:  # the call due first (maybe others too) is overdue
                    now = time.monotonic()
                    for ref in [ref for ref, (_, deadline, _) in pending.items() if now >= deadline]:
                        index, _, starting = pending.pop(ref)
                        self._replace(index, restarts, f"did not start within {start_timeout:g} s" if starting else
                                      f"did not return its samples within sample_timeout_s={timeout:g} s")
                        submit(index)
                    continue
                index, _, starting = pending.pop(ready[0])
                try:
                    outcome = ray.get(ready[0])
                    if starting:
                        self._starting.discard(index)
                        submit(index)
                        continue
                    results[index] = outcome
                    self.versions[index] = version
                except RayActorError as error:
                    if getattr(error, "_actor_init_failed", False):  # its __init__ raised: a restart would too
                        self._drop(index)
                        raise EnvRunnerError(f"env runner {index} could not start: {_init_failure(error)}") from None
                    # Ray's text without its tab-indented fields (actor id, pid, namespace, ip): one line
                    why = " ".join(line.strip() for line in str(error).splitlines() if line.strip() and line[0] != "\t")
                    self._replace(index, restarts, f"died ({why})", error)
                    submit(index)
        except BaseException:
            # Ctrl-C, or a runner given up: the calls still running would hold their runners (and
            # their late results the next call's) after this one is gone, so those runners go.
            for index, _, _ in pending.values():
                self._drop(index)
            raise
        return [results[index] for index in range(len(self.runners))]  # in runner order: seeded runs repeat

    def _replace(self, index: int, restarts: list[int], why: str, error: BaseException | None = None) -> None:
        """Kill runner ``index`` and start a replacement; raise :class:`EnvRunnerError` once it has
        been replaced ``max_restarts`` times in this call."""

        restarts[index] += 1
        self.num_restarts += 1
        self._drop(index)
        if restarts[index] > self.max_restarts:  # the next call starts a new runner in its slot
            raise EnvRunnerError(f"env runner {index} {why} (failure {restarts[index]} of this iteration; "
                                 f"max_runner_restarts={self.max_restarts})") from error
        logger.warning("env runner %d %s; starting a replacement", index, why)
        self._renew(index)

    def _renew(self, index: int) -> None:
        """A new runner in slot ``index`` (its start is awaited before it is asked to sample)."""
        self.runners[index], self.versions[index] = self._make(), -1
        self._starting.add(index)

    def _drop(self, index: int) -> None:
        """Kill runner ``index`` and leave its slot empty (the next call fills it)."""
        import ray

        runner, self.runners[index], self.versions[index] = self.runners[index], None, -1
        if runner is not None:
            with contextlib.suppress(Exception):  # it may be gone already
                ray.kill(runner, no_restart=True)

    def _submit(self, index: int, version: int, state_blob: bytes, weights_ref: Any, steps: int) -> Any:
        blob = state_blob if self.versions[index] != version else None
        return self.runners[index].sample.remote(version, blob, weights_ref, steps)

    def stop(self) -> None:
        """Kill the runners; shut Ray down if this module started it and no other group uses it."""
        import ray

        _forget_a_ray_shut_down_under_us()  # a Ray the user started since is theirs
        current = self._generation == _started_ray["generation"]
        # Runners of a Ray shut down under them are gone with it (ray.kill would start a new Ray).
        for runner in self.runners if current and ray.is_initialized() else ():
            if runner is None:
                continue
            try:
                ray.kill(runner)
            except Exception:
                logger.debug("killing a runner raised", exc_info=True)
        self.runners = []
        if not self.owns_ray:
            return
        self.owns_ray = False
        if not current:  # its Ray is gone already
            return
        _started_ray["users"] -= 1
        if _started_ray["users"] > 0:
            return
        if ray.is_initialized():
            ray.shutdown()
        _shut_down_cluster()
        _started_ray["address"] = None


def _shut_down_cluster() -> None:
    """Shut down the local Ray head this module started, if any (leaving the machine's Ray address file)."""
    cluster, _started_ray["cluster"] = _started_ray["cluster"], None
    if cluster is not None:
        _shut_down_head(cluster)


def _shut_down_head(cluster: Any) -> None:
    """Shut down a :class:`ray.cluster_utils.Cluster` head, leaving the machine's Ray address file."""
    with _HEAD_LOCK, _ray_address_file_untouched():
        cluster.shutdown()


# Starting or stopping the local head swaps functions of Ray's modules for a while: one at a time.
_HEAD_LOCK = threading.RLock()


def _forget_a_ray_shut_down_under_us() -> None:
    """When this process is no longer connected to the Ray this module started (the user's
    ``ray.shutdown()``, maybe followed by a ``ray.init()`` of their own), that Ray is not ours to
    count users of or to shut down any more: its groups are left behind and its head, if any, stops."""
    import ray

    started = _started_ray["address"]
    if started is None or (ray.is_initialized() and ray.get_runtime_context().gcs_address == started):
        return
    _shut_down_cluster()
    _started_ray["users"], _started_ray["address"] = 0, None
    _started_ray["generation"] += 1


def _may_be(address: str, gcs_address: str) -> bool:
    """Whether the Ray at ``gcs_address`` (connected) may be the one ``address`` names: "auto" and
    Ray Client addresses say nothing checkable, and ``localhost`` is the node's own IP to Ray."""
    if address == "auto" or address.startswith("ray://"):
        return True
    if address == "local":
        return False
    host, _, port = address.rpartition(":")
    connected_host, _, connected_port = gcs_address.rpartition(":")
    if port != connected_port:
        return False
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        return True  # cannot tell: no warning on a guess
    if ip == connected_host:
        return True
    # Ray reaches its own node's head at the node's IP: "localhost" names only a Ray on this node.
    return ip.startswith("127.") and (connected_host.startswith("127.") or connected_host == _node_ip())


def _node_ip() -> str:
    """This machine's address as Ray gives it to a head started here."""
    import ray.util

    return ray.util.get_node_ip_address()


def _init_failure(error: BaseException) -> str:
    """The last line of the error that a runner's ``__init__`` raised (Ray's traceback around it
    dropped, colours too): ``"VectorEnvError: env 0: its factory raised ..."``."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.splitlines() if re.match(r"^\s*[\w.]+(Error|Exception)\b.*: ", line)]
    return lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else type(error).__name__


def _start_local_ray(num_cpus: int | None) -> Any:
    """Start and join a one-machine Ray head without the processes a local run does not use.

    Returns the :class:`ray.cluster_utils.Cluster` to shut down later, or None when Ray's
    developer API did not take these options and a plain ``ray.init()`` started Ray instead.
    """
    import ray

    system_config = {"prestart_worker_first_driver": False}  # no idle worker ahead of the runners
    try:
        from ray._private.utils import estimate_available_memory, get_num_cpus, resolve_object_store_memory
        from ray.cluster_utils import Cluster

        with _HEAD_LOCK, _head_without_dashboard_server(), _ray_address_file_untouched():
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": num_cpus if num_cpus is not None else get_num_cpus(),  # Ray's count: cgroup limits too
                "object_store_memory": resolve_object_store_memory(estimate_available_memory()),  # Ray's default
                "include_dashboard": False, "no_monitor": True, "include_log_monitor": False,
                "_system_config": system_config})
    except (ImportError, TypeError, ValueError, AttributeError) as error:
        logger.info("lean Ray head unavailable (%s); starting Ray with ray.init()", error)
        # "local": a new Ray of our own, even when a cluster is running on this machine.
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, _system_config=system_config)
        return None
    try:
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
    except BaseException:
        _shut_down_head(cluster)
        raise
    return cluster


@contextlib.contextmanager
def _ray_address_file_untouched() -> Iterator[None]:
    """Keep :class:`ray.cluster_utils.Cluster` from writing its head's address into the machine's
    Ray address file (``/tmp/ray/ray_current_cluster``, where a plain ``ray.init()`` finds a
    running cluster) and from deleting that file when it shuts down: other programs would join
    this private head, or lose their own cluster. Ray's helpers for the file, looked up at call
    time, do nothing meanwhile (whatever else writes the file is left alone)."""
    import importlib

    replaced = []
    for module_name in ("ray._private.utils", "ray._common.utils"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in ("write_ray_address", "reset_ray_address"):
            if callable(getattr(module, name, None)):
                replaced.append((module, name, getattr(module, name)))
                setattr(module, name, _leave_the_address_file)
    try:
        yield
    finally:
        for module, name, original in replaced:
            setattr(module, name, original)


def _leave_the_address_file(*args: Any, **kwargs: Any) -> None:
    """Stands in for Ray's writer and remover of its address file (see :func:`_ray_address_file_untouched`)."""


@contextlib.contextmanager
def _head_without_dashboard_server() -> Iterator[None]:
    """Have :class:`ray.cluster_utils.Cluster` build its head node without the dashboard server.

    With ``include_dashboard=False`` Ray still starts that server (about 60 MB) to run its
    usage-stats module alone. The cluster builds its head from ``ray._private.node.Node``, looked
    up at call time, so a subclass stands in for it while the head starts and is put back after.
    """
    import ray._private.node as node_module

    original = node_module.Node

    class _HeadNode(original):  # type: ignore[misc, valid-type]
        def start_api_server(self, *args: Any, **kwargs: Any) -> None:
            self._webui_url = None

    node_module.Node = _HeadNode
    try:
        yield
    finally:
        node_module.Node = original
