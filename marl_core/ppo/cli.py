"""``marl-train``: train a preset with a progress bar, logs, a learning curve and checkpoints.

Usage::

    marl-train rps --minutes 1 --out runs/rps
    marl-train pistonball --iterations 20 --set training.lr=3e-4 --set num_envs_per_env_runner=2
    marl-train connect4 --resume runs/connect4-20261123-101500/final --minutes 10

The run directory gets ``progress.csv``, TensorBoard files under ``tb/``, ``learning_curve.png``,
a checkpoint every ``--checkpoint-every`` iterations (``checkpoint/``), the final checkpoint in
``final/`` (also written on Ctrl-C) and the preset's final result in ``final_result.json``.

Ctrl-C (or SIGTERM, as schedulers send) lets the current iteration finish, then saves the final
checkpoint and exits with 130 (143 for SIGTERM); a second signal interrupts at once (the final
checkpoint is still saved). During the preset's final evaluation, after the final checkpoint, the
first signal stops it at once, with the same status. ``--resume CHECKPOINT`` continues such a run: the checkpoint's config,
weights, optimizer states, counters and RNG states, with ``--set``, ``--seed``, ``--ray-address``
and ``--num-cpus`` applied on top; ``--minutes`` and ``--iterations`` then count from there.
``--minutes`` counts from the start, Ray's start-up included; at least one iteration runs.
Resumed into its old run directory (``--out``), it continues that directory's logs from the
checkpoint's iteration (rows of later iterations are trained again, so they are dropped). Stopping between
iterations, not wherever the interrupt lands, keeps the logs' writer threads and the checkpoint
consistent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from marl_core._cli import number_arg, quiet_on_closed_pipe
from marl_core.errors import CheckpointError, ConfigError, MultiAgentEnvError, RunLogError
from marl_core.ppo.presets import PRESETS, load_preset


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``marl-train``."""
    parser = argparse.ArgumentParser(prog="marl-train", description="Train a multi-agent PPO preset on Ray.")
    parser.add_argument("preset", choices=sorted(PRESETS), help="what to train")
    parser.add_argument("--minutes", type=number_arg(float), default=None,
                        help="time budget, start-up included; at least one iteration runs (default: the preset's)")
    parser.add_argument("--iterations", type=number_arg(int), default=None, help="stop after this many iterations")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/PRESET-TIME)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the preset's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. training.lr=3e-4 (repeatable); a JSON object for "
                             "model or env_config merges into the preset's")
    parser.add_argument("--ray-address", default=None, help="Ray cluster to join (default: start one locally)")
    parser.add_argument("--num-cpus", type=number_arg(int), default=None, help="CPUs of the local Ray")
    parser.add_argument("--checkpoint-every", type=number_arg(int, inclusive=True, why=" (0: none but the final one)"),
                        default=10, help="iterations between checkpoints (0: only the final checkpoint)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--resume", type=Path, default=None, metavar="CHECKPOINT",
                        help="continue the run saved in this checkpoint (a checkpoint/ or final/ directory)")
    return parser


def _summary(result: dict[str, Any]) -> str:
    parts = [f"it {result['training_iteration']}", f"{result['env_steps_per_s']:.0f} steps/s"]
    if result.get("num_env_errors"):
        parts.append(f"{result['num_env_errors']} env errors")
    for policy_id, metrics in result["policies"].items():
        value = metrics.get("episode_return_mean", math.nan)
        if not math.isnan(value):
            parts.append(f"{policy_id} {value:.2f}")
    evaluation = result.get("evaluation", {}).get("policies", {})
    played = [f"{policy_id} {metrics['episode_return_mean']:.2f}" for policy_id, metrics in evaluation.items()
              if not math.isnan(metrics["episode_return_mean"])]
    if played:
        parts.append("evaluation: " + ", ".join(played))
    return " | ".join(parts)


@quiet_on_closed_pipe
def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status.

    A SIGTERM while the run starts stops it as Ctrl-C does (nothing trained, nothing left behind),
    with status 143; once it trains, :class:`StopRequest` takes both signals over.
    """
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        return _main(argv)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


class _Terminated(KeyboardInterrupt):
    """SIGTERM while the run starts: stopped as Ctrl-C stops it, with status 143."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def _terminate_again() -> None:
    """Take SIGTERM back from Ray, whose start installs its own handler (it exits with status 1)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if os.getcwd() not in sys.path:  # like `python -m`: "module:name" references resolve from here
        sys.path.insert(0, os.getcwd())
    from tqdm import tqdm

    from marl_core.ppo.progress import RunLogger

    preset = load_preset(args.preset)
    config = preset.build_config()
    changed: set[str] = set()  # the fields the command line set: a resumed run takes them too
    merged: dict[str, dict[str, Any]] = {}  # JSON objects for model or env_config: a resume merges them into its own
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"marl-train: --set needs KEY=VALUE, received {item!r}", file=sys.stderr)
            return 2
        try:
            config.set(key.strip(), value)
        except ConfigError as error:
            print(f"marl-train: --set {item}: {error}", file=sys.stderr)
            return 2
        name = key.strip().rpartition(".")[2]
        changed.add(name)
        if name in ("model", "env_config"):
            with contextlib.suppress(ValueError):
                given = json.loads(value)
                if isinstance(given, dict):
                    merged[name] = {**merged.get(name, {}), **given}
    for name in ("seed", "ray_address", "num_cpus"):
        if getattr(args, name) is not None:
            setattr(config, name, getattr(args, name))
            changed.add(name)
    minutes = args.minutes if args.minutes is not None else (None if args.iterations else preset.default_minutes)
    out = args.out or Path("runs") / f"{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(os.path.normpath(out))  # "a/../b" is b: the directories made for the run are b's
    start = time.monotonic()
    deadline = start + 60 * minutes if minutes is not None else math.inf
    refusal = _run_dir_refusal(out, resuming=args.resume)
    if refusal:
        print(f"marl-train: {refusal}", file=sys.stderr)
        return 2
    created: list[Path] = []  # the directories a new run made for --out
    if args.resume is not None:
        try:
            algo = _resume(preset.name, config, args.resume, {name: getattr(config, name) for name in changed}, merged)
            _terminate_again()
        except KeyboardInterrupt as stop:  # loading the checkpoint, starting Ray
            return _interrupted_while_starting(stop)
        if algo is None:
            return 2
    else:
        created = _missing_dirs(out)
        try:
            config.validate()  # before the run directory exists: a bad setting leaves nothing behind
            try:
                out.mkdir(parents=True, exist_ok=True)  # before Ray starts: a bad --out fails at once
            except OSError as error:  # a file in the way, no permission, ...
                raise ConfigError(f"--out {str(out)!r} cannot be a run directory: {error}") from error
            _lock_run_dir(out)
            algo = config.build()
            _terminate_again()
        except (MultiAgentEnvError, ConnectionError, KeyboardInterrupt) as error:  # a bad setting, no cluster, Ctrl-C
            _unlock_run_dir(out)
            _remove_if_empty(created)
            if isinstance(error, KeyboardInterrupt):
                return _interrupted_while_starting(error)
            print(f"marl-train: cannot build the trainer: {error}", file=sys.stderr)
            return 2
    run_log = None
    created_for_resume: list[Path] = []
    try:
        if args.resume is not None:
            created_for_resume = _missing_dirs(out)
            out.mkdir(parents=True, exist_ok=True)  # only once its checkpoint loaded
            _lock_run_dir(out)
        algo.out_dir = out  # callbacks and ``preset.final`` can write next to the logs
        # What a resume can refuse (unreadable logs, a callback's damaged state) comes before what
        # it changes (logs cut back to the checkpoint), so a refused resume leaves the run directory as it was.
        if args.resume is not None:
            RunLogger.check_resume(out)
        for hook in preset.start:
            hook(algo)
        run_log = RunLogger(out, resume_at=algo.iteration if args.resume is not None else None)
        print(f"marl-train {preset.name}: writing to {out}"
              + (f" (resumed from {args.resume} at iteration {algo.iteration})" if args.resume else ""))
    except BaseException as error:
        algo.stop()
        if run_log is not None:
            run_log.close()
        if not isinstance(error, ConfigError):  # a ConfigError here: another run holds the lock
            _unlock_run_dir(out)
            _remove_if_empty(created_for_resume or created)  # a refused or stopped start leaves no directory
        if isinstance(error, CheckpointError):  # a callback's saved state, damaged
            print(f"marl-train: cannot resume from {args.resume}: {error}", file=sys.stderr)
            return 2
        if isinstance(error, RunLogError):  # a resumed run directory whose logs cannot be continued
            print(f"marl-train: cannot continue the logs in {out}: {error}", file=sys.stderr)
            return 2
        if isinstance(error, ConfigError):
            print(f"marl-train: {error}", file=sys.stderr)
            return 2
        if isinstance(error, OSError):  # the logs' place taken by a file, no permission, ...
            print(f"marl-train: --out {str(out)!r} cannot be a run directory: {error}", file=sys.stderr)
            return 2
        if isinstance(error, KeyboardInterrupt):  # before the signal handlers are in place
            return _interrupted_while_starting(error)
        raise
    bar = tqdm(total=args.iterations, disable=args.no_progress, unit="it", dynamic_ncols=True)
    status = 0
    first = algo.iteration
    late = StopRequest(shield="stopping the env runners and Ray")
    try:
        status = _train(algo, preset, args, run_log, bar, out, deadline, start)
        if preset.final is not None and not status and algo.iteration > first:
            status = _final(algo, preset, out)
    except KeyboardInterrupt as stop:  # a signal repeated while the final checkpoint was written: abandoned
        status = 143 if isinstance(stop, _Terminated) else 130
    finally:
        try:
            with late:  # Ray's own handlers would say nothing and exit with 15
                algo.stop()
                _unlock_run_dir(out)
        except KeyboardInterrupt:
            status = 130
    return status or (late.exit_status if late.requested else 0)


def _interrupted_while_starting(stop: KeyboardInterrupt) -> int:
    """Say that Ctrl-C (or SIGTERM) stopped the run before it trained; return its status."""
    print(f"\n{'terminated' if isinstance(stop, _Terminated) else 'interrupted'} while starting: nothing was "
          "trained", file=sys.stderr)
    return 143 if isinstance(stop, _Terminated) else 130


_RUN_FILES = ("progress.csv", "checkpoint", "final")


def _missing_dirs(out: Path) -> list[Path]:
    """``out`` and its parents that do not exist yet (the leaf first): what making ``out`` creates."""
    return [path for path in (out, *out.parents) if not path.exists()]


def _remove_if_empty(paths: list[Path]) -> None:
    """Remove the directories ``paths`` (the leaf first) made for a run that did not start, each
    left as it is unless still empty."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.rmdir()


def _run_dir_refusal(out: Path, *, resuming: Path | None) -> str | None:
    """Why ``out`` cannot take this run (None: it can): a file in the way, or the logs and
    checkpoints of another run, which this one would mix with its own and replace: a new run's
    ``out`` holds none, a resumed run's holds none but those of the run it resumes."""
    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} cannot be a run directory: it is a file"
    found = [name for name in _RUN_FILES if (out / name).exists()]
    if not found or (resuming is not None and (_same_dir(_real(resuming).parent, out) or _same_dir(resuming, out))):
        return None  # the run it resumes (or a run directory given as the checkpoint, which its load names)
    checkpoints = [str(out / name) for name in ("checkpoint", "final") if (out / name).exists()]
    go_on = f"continue it with --resume {' (or '.join(checkpoints)}{')' if len(checkpoints) > 1 else ''}, or " if checkpoints else ""
    if resuming is None:
        return f"{out} already holds a run ({', '.join(found)}): {go_on}pick another --out"
    return (f"{out} already holds another run ({', '.join(found)}), which resuming {resuming} there would "
            f"overwrite: {go_on}pick another --out for the resumed run")


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _real(path: Path) -> Path:
    """``path`` with its links followed (a ``latest`` link to a run's checkpoint is that checkpoint)."""
    try:
        return path.resolve()
    except OSError:
        return path


_LOCK = ".marl-train.pid"


def _lock_run_dir(out: Path) -> None:
    """Claim ``out`` for this process (its pid in a lock file); a lock of a process that is gone
    is taken over.

    Raises:
        ConfigError: another live marl-train writes to ``out``, or the lock file cannot be written.
    """
    lock = out / _LOCK
    for _ in range(2):
        try:
            with open(lock, "x") as file:  # atomic: one of two racing runs wins
                file.write(f"{os.getpid()} {_started(os.getpid()) or ''}".strip())
            return
        except FileExistsError:  # taken: by a live run, or left by a killed one
            try:
                holder, _, started = lock.read_text().strip().partition(" ")
                pid = int(holder or 0)
            except (OSError, ValueError):
                pid, started = 0, ""
            # The start time tells the run apart from a later process given the same pid.
            if pid and pid != os.getpid() and _alive(pid) and started in ("", _started(pid) or started):
                raise ConfigError(f"another marl-train (pid {pid}) is writing to {out}; pick another --out (or, if "
                                  f"no marl-train runs there, remove {lock})") from None
            with contextlib.suppress(OSError):
                lock.unlink()  # left by a run that was killed
        except OSError as error:  # a read-only directory, say
            raise ConfigError(f"--out {str(out)!r} cannot be a run directory: {error}") from error
    raise ConfigError(f"cannot claim {out} for this run (its lock file {lock} keeps coming back)")


def _unlock_run_dir(out: Path) -> None:
    lock = out / _LOCK
    with contextlib.suppress(OSError, ValueError):
        if int(lock.read_text().split()[0]) == os.getpid():
            lock.unlink()


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``); None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:  # no /proc (macOS, Windows), or the process is gone
        return None
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _drop_later_final_result(out: Path, iteration: int) -> None:
    """A resumed run trains again from its checkpoint's ``iteration``: a ``final_result.json`` of a
    later iteration describes training that is thrown away (the run may stop before writing its own)."""
    path = out / "final_result.json"
    try:
        at = json.loads(path.read_text()).get("iteration")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(at, int) and at > iteration:
        path.unlink()
        print(f"marl-train: removed {path} (iteration {at}), which the run resumed from iteration {iteration} "
              "trains again", file=sys.stderr)


def _final(algo: Any, preset: Any, out: Path) -> int:
    """Run the preset's final step (an evaluation) and write its result; return the exit status.

    A signal stops it at once (130 for SIGINT, 143 for SIGTERM): the final checkpoint is saved
    by then, and evaluations written as they are played stay.
    """
    stop = StopRequest(at_once=True)
    try:
        with stop:
            final = preset.final(algo, out)
    except KeyboardInterrupt:
        print("\ninterrupted: the final evaluation stopped (the final checkpoint is saved)", file=sys.stderr)
        return stop.exit_status
    if isinstance(final, dict):
        final = {**final, "iteration": final.get("iteration", algo.iteration)}  # which checkpoint it describes
    (out / "final_result.json").write_text(json.dumps(final, indent=2, default=str))
    print(json.dumps(final, indent=2, default=str))
    return 0


# Fields that --set turns from "module:name" text into the object it names.
_IMPORT_PATH_FIELDS = ("env", "policy_mapping_fn")


def _resume(preset: str, config: Any, checkpoint: Path, changed: dict[str, Any],
            merged: dict[str, dict[str, Any]]) -> Any:
    """The algorithm saved at ``checkpoint`` with the ``changed`` fields (``merged``: JSON objects
    given for dict fields, merged into the checkpoint's, as ``--set`` merges them into a preset's);
    None (after saying why) when it cannot be loaded or trains another env than the preset."""
    from marl_core.ppo.algorithm import PPO
    from marl_core.ppo.checkpoint import saved_setting
    from marl_core.ppo.config import reference_of

    for name, given in merged.items():
        saved = saved_setting(checkpoint, name)
        if isinstance(saved, dict):  # else from_checkpoint says what is wrong with the checkpoint
            changed = {**changed, name: {**saved, **given}}
    try:
        algo = PPO.from_checkpoint(checkpoint, **changed)
    except ConnectionError as error:  # --ray-address auto with no cluster running
        print(f"marl-train: cannot resume from {checkpoint}: {error}", file=sys.stderr)
        return None
    except MultiAgentEnvError as error:  # a missing or damaged checkpoint, a bad override, ...
        print(f"marl-train: cannot resume from {checkpoint}: {error}", file=sys.stderr)
        asked = sorted(set(re.findall(r"pass (\w+)=", str(error)))) if "to from_checkpoint" in str(error) else []
        by_name = [name for name in asked if name in _IMPORT_PATH_FIELDS]
        if by_name:  # what from_checkpoint takes by name, --set passes
            print(f"marl-train: --set passes {' and '.join(by_name)} to from_checkpoint as an import path, e.g. "
                  f"--set {by_name[0]}=my_module:my_function", file=sys.stderr)
        if len(by_name) < len(asked):
            print(f"marl-train: {' and '.join(n for n in asked if n not in by_name)} cannot come from the command "
                  "line: load the checkpoint in Python, PPO.from_checkpoint(path, ...)", file=sys.stderr)
        return None
    saved, wanted = reference_of(algo.config.env), reference_of(config.env)
    if saved is not None and wanted is not None and saved != wanted:
        algo.stop()
        print(f"marl-train: {checkpoint} trains env {saved}, but preset {preset!r} trains {wanted}",
              file=sys.stderr)
        return None
    return algo


class StopRequest:
    """While active, the first SIGINT or SIGTERM only sets :attr:`requested`; a second raises KeyboardInterrupt.

    So Ctrl-C, or a scheduler's SIGTERM, ends the run after the current iteration with a final
    checkpoint; :attr:`signal` is the first signal received (None: none). With ``at_once``, the
    first signal raises KeyboardInterrupt already (there is nothing to finish first); with
    ``shield`` (what it guards, for the message), only a second one does: that finishes first.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, *, at_once: bool = False, shield: str | None = None) -> None:
        self.requested = False
        self.signal: int | None = None
        self.at_once = at_once
        self.shield = shield
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # signals can be set only there
            self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.shield:  # what it guards finishes first (a second signal abandons it); the status says it came
            if self.requested:
                raise KeyboardInterrupt
            self.requested, self.signal = True, signum
            os.write(2, f"\n{signal.Signals(signum).name}: finishing {self.shield} first (interrupt again to "
                        "abandon it)\n".encode())
            return
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.signal = signum
        if self.at_once:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name.encode()
        # os.write, not print: the handler may run while the main thread is inside a print.
        os.write(2, b"\n" + name + b": finishing this iteration, then saving the final checkpoint "
                 b"(interrupt again to stop now)\n")

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    @property
    def exit_status(self) -> int:
        """The shell's status for the signal that stopped the run: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + int(self.signal if self.signal is not None else signal.SIGINT)


def _train(algo: Any, preset: Any, args: argparse.Namespace, run_log: Any, bar: Any, out: Path,
           deadline: float, start: float) -> int:
    """Iterate until done; save the final checkpoint if anything was trained; return the exit status."""
    status = 0
    first = algo.iteration
    stop = StopRequest()
    try:
        with stop:
            _iterate(algo, preset, args, run_log, bar, out, deadline, stop)
        status = stop.exit_status if stop.requested else 0
    except KeyboardInterrupt:
        status = stop.exit_status
        print("\ninterrupted: saving the final checkpoint", file=sys.stderr)
    except (MultiAgentEnvError, OSError) as error:  # an env or a setting that failed while sampling, a full disk
        cause = getattr(error, "cause", None)  # a Ray task error carries the runner's own error
        shown = cause if isinstance(cause, MultiAgentEnvError) else error
        print(f"\nmarl-train: training stopped at iteration {algo.iteration}: {type(shown).__name__}: {shown}",
              file=sys.stderr)
        status = 1
    finally:
        bar.close()
        with StopRequest(shield="the final checkpoint and logs") as late:
            try:
                if algo.iteration == first:  # an untrained checkpoint would only claim a new run's --out, or
                    # roll a resumed run's final/ back to the checkpoint it resumed from
                    print("marl-train: no final checkpoint: nothing was trained", file=sys.stderr)
                else:
                    final_path = algo.save(out / "final")
                    print(f"final checkpoint: {final_path} (iteration {algo.iteration}, "
                          f"{time.monotonic() - start:.0f} s)")
            except CheckpointError as error:  # a full disk, say
                print(f"marl-train: no final checkpoint at iteration {algo.iteration}: {error}", file=sys.stderr)
                status = status or 1
            try:
                run_log.close()
                if run_log.started and run_log.rows:
                    run_log.plot(title=f"{preset.name}: episode return")
            except OSError as error:  # the checkpoint is what counts; the logs say what they could
                print(f"marl-train: cannot finish the logs in {out}: {error}", file=sys.stderr)
                status = status or 1
        if late.requested and not status:
            status = late.exit_status
    return status


def _iterate(algo: Any, preset: Any, args: argparse.Namespace, run_log: Any, bar: Any, out: Path,
             deadline: float, stop: StopRequest) -> None:
    first = algo.iteration
    last = math.inf if args.iterations is None else first + args.iterations
    # The budget counts Ray's start-up: one spent on it still trains an iteration, as Tune's
    # time_total_s stops only after one.
    while (time.monotonic() < deadline or algo.iteration == first) and not stop.requested and algo.iteration < last:
        if not run_log.started:  # a resumed run's later logs and final result go only now, as it trains
            if args.resume is not None:
                _drop_later_final_result(out, algo.iteration)
            run_log.start()
        result = algo.train()
        try:
            for callback in preset.callbacks:
                callback(algo, result)
        finally:  # the iteration trained (and the final checkpoint will hold it): its row goes in
            run_log.log(result)
        if result.get("num_env_errors"):  # the runners' logs stay in their processes: say it here
            bar.write(f"marl-train: iteration {algo.iteration}: {result['num_env_errors']} env error(s), "
                      f"each env rebuilt and its episode dropped; the first: {algo.last_env_error}", file=sys.stderr)
        bar.update(1)
        bar.set_postfix_str(_summary(result))
        if args.no_progress:
            print(_summary(result), flush=True)
        if args.checkpoint_every and algo.iteration % args.checkpoint_every == 0:
            algo.save(out / "checkpoint")


if __name__ == "__main__":
    sys.exit(main())
