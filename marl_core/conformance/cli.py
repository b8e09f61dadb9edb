"""``marl-check MODULE:ATTR``: check a multi-agent env from the command line.

Exit status: 0 when no error was found (warnings allowed), 1 when errors were found, 2 when no
report could be made: the target cannot be imported or built, the arguments are wrong, or the
check itself failed (the message says which). A check stopped by ``--timeout`` or Ctrl-C prints
what it found until then (``"stopped"`` says where it was) and exits with 1 when that holds
errors, else 2 (130 for Ctrl-C). ``--json`` prints the report as JSON for CI, alone
on stdout (what the env prints goes to stderr); otherwise it prints plain text (no colour codes).
With ``--json``, a run that produces no report (exit status 2) prints
``{"target", "ok": false, "error", "findings": []}`` (``"target"`` is null when the arguments
name none, or fail to parse before naming it), and ``--list-rules`` prints the rules as a JSON list. A class or factory that needs
arguments gets them from ``--config JSON`` (called as ``TARGET(config)``, as RLlib passes
``env_config``) or ``--kwargs JSON`` (``TARGET(**kwargs)``, as PettingZoo's env functions take them).

Example:
    >>> from marl_core.conformance.cli import main
    >>> main(["marl_core.envs:RockPaperScissors", "--episodes", "1"])  # doctest: +ELLIPSIS
    marl-check marl_core.envs:RockPaperScissors: OK, 0 errors, 0 warnings (seed 0, 1 episodes, ...)
    0
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import dataclasses
import importlib
import inspect
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from marl_core._cli import quiet_on_closed_pipe
from marl_core.conformance.collect import ENV_ERRORS, CheckInterrupted, describe, format_exception
from marl_core.conformance.rules import RULES, catalog_markdown
from marl_core.conformance.runner import DEFAULT_EPISODES, DEFAULT_MAX_STEPS, check_env
from marl_core.errors import ConformanceError, install_hint


class TargetImportError(Exception):
    """The ``MODULE:ATTR`` argument names nothing importable (the message says why)."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser; with ``--json`` its usage errors also print the JSON failure report."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json_errors = False
        self.parsed = argparse.Namespace()  # what the arguments have set so far (the target, once read)

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            # A target written after --skip is still in its list until the arguments have parsed.
            target = getattr(self.parsed, "target", None) or next(
                (value for value in getattr(self.parsed, "skip", None) or () if _is_target(value)), None)
            print(json.dumps(_failure(target, f"usage: {message}"), indent=2))
        super().error(message)


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for ``--json`` (abbreviations included), however the rest parses."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--json", action="store_true")
    try:
        return bool(probe.parse_known_args(argv)[0].json)
    except SystemExit:  # "--j" is ambiguous for no parser: the real one reports it
        return False


def _parser() -> _Parser:
    parser = _Parser(
        prog="marl-check",
        description="Check a multi-agent env against the marl-bridges contract and report every violation.",
        epilog="Exit status: 0 no errors, 1 errors found, 2 no report (target cannot be imported or built, bad "
               "arguments) or a check stopped by --timeout before it found errors, 130 Ctrl-C (a check stopped "
               "early reports what it found until then).",
    )
    parser.add_argument(
        "target",
        nargs="?",
        help="MODULE:ATTR naming an env class, a factory or an env instance, e.g. mypkg.envs:MyEnv or "
        "path/to/my_env.py:MyEnv",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    parser.add_argument(
        "--episodes", type=int, default=DEFAULT_EPISODES, help=f"episodes to explore (default {DEFAULT_EPISODES})"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        help=f"step budget per episode (default {DEFAULT_MAX_STEPS})",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="rule ids not to check (see --list-rules)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"stop when the check takes longer, e.g. an env call that hangs, and report what it found until "
             f"then (status 1 with errors, else 2; default {DEFAULT_TIMEOUT:.0f}; 0: never); an env that catches "
             f"the stop has the command exit with 2 and no report {STUCK_GRACE_S:g} s later",
    )
    arguments = parser.add_mutually_exclusive_group()
    arguments.add_argument(
        "--config",
        type=_json_object,
        metavar="JSON",
        help="build the env as TARGET(config) with this JSON object, as RLlib passes env_config, e.g. "
             "--config '{\"n_agents\": 4}'",
    )
    arguments.add_argument(
        "--kwargs",
        type=_json_object,
        metavar="JSON",
        help="build the env as TARGET(**kwargs) with this JSON object's keys, as PettingZoo's env functions take "
             "them, e.g. pettingzoo.butterfly.pistonball_v6:env --kwargs '{\"n_pistons\": 4}'",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule catalog and exit")
    return parser


def _json_object(text: str) -> dict[str, Any]:
    """A JSON object from the command line (argparse reports the ValueError as a usage error)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, received {text!r}")
    return value


_ARGUMENTS_HINT = ("; marl-check passes arguments with --config JSON (one config argument, as RLlib passes "
                   "env_config) or --kwargs JSON (keyword arguments, as PettingZoo's env functions take them)")


def _with_arguments(obj: Any, args: argparse.Namespace) -> Any:
    """``obj`` called with ``--config`` or ``--kwargs`` when they are given: a factory of envs, each
    built with its own (deep) copy of them, as RLlib gives each env its own config; else ``obj``.

    Raises:
        TargetImportError: they are given but ``obj`` is not a class or factory, or cannot take them.
    """
    if args.config is None and args.kwargs is None:
        return obj
    flag = "--config" if args.config is not None else "--kwargs"
    if not callable(obj) or (not inspect.isclass(obj) and callable(getattr(obj, "reset", None))):
        raise TargetImportError(f"{flag} needs a class or factory to call, but {args.target} is "
                                f"{type(obj).__name__} instance {obj!r}")
    positional, keywords = ((args.config,), {}) if args.config is not None else ((), args.kwargs)
    try:
        signature: inspect.Signature | None = inspect.signature(obj)
    except ValueError:  # no signature to read (a builtin): the call says
        signature = None
    try:
        if signature is not None:
            signature.bind(*positional, **keywords)
    except TypeError as error:  # the arguments do not fit: say so before building anything
        given = "one config argument" if args.config is not None else f"keyword arguments {sorted(keywords)}"
        raise TargetImportError(f"{flag}: {args.target} cannot be called with {given}: {error} (signature "
                                f"{signature})") from None

    def build() -> Any:
        return obj(*copy.deepcopy(positional), **copy.deepcopy(keywords))

    # Named as the target, so that what the checker says of the factory names it.
    build.__module__ = getattr(obj, "__module__", build.__module__)
    build.__qualname__ = build.__name__ = getattr(obj, "__qualname__", build.__qualname__)
    return build


DEFAULT_TIMEOUT = 900.0
# How long past --timeout the command waits for the check to stop before it exits without a report.
STUCK_GRACE_S = 10.0


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CheckInterrupted` in this (the main) thread after ``seconds``, and every
    second after that until the check ends (an env's bare ``except:`` may swallow one); 0 or
    infinity: never. Where there is no interval timer (Windows) there is no limit. A timer the
    caller had armed is armed again afterwards, for the time it had left."""
    if not _can_limit(seconds):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CheckInterrupted

    previous_handler = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    previous_delay, previous_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        if previous_delay > 0:
            left = max(previous_delay - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, previous_interval)


def _can_limit(seconds: float) -> bool:
    """Whether :func:`_time_limit` arms a limit of ``seconds`` here (an interval timer, in the main thread)."""
    return (0 < seconds < math.inf and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread())


@contextlib.contextmanager
def _exit_if_stuck(args: argparse.Namespace) -> Iterator[None]:
    """Exit the process with status 2 when the check has not stopped :data:`STUCK_GRACE_S`
    seconds after ``--timeout``: an env that catches every exception in a loop (a bare
    ``except:``) swallows the stops :func:`_time_limit` raises, and the command would hang.
    Only for the command (``args.as_command``), around the check alone (never its report), and
    only where the limit is armed."""
    if not (args.as_command and _can_limit(args.timeout)):
        yield
        return
    try:
        stdout = os.dup(1)  # the JSON goes where stdout was, whatever the env did with it since
    except OSError:
        stdout = None

    def give_up() -> None:
        message = (f"the check did not stop within {STUCK_GRACE_S:g} s after --timeout {args.timeout:g} s: the env's "
                   "code catches the stop (a bare `except:` or `except BaseException` in a loop, say) or is stuck "
                   "where Python cannot interrupt it; exiting without a report")
        try:
            os.write(2, f"marl-check: {message}\n".encode())
            if args.json and stdout is not None:
                os.write(stdout, (json.dumps(_failure(args.target, message), indent=2) + "\n").encode())
        finally:
            os._exit(2)

    watchdog = threading.Timer(args.timeout + STUCK_GRACE_S, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        if stdout is not None:
            os.close(stdout)


def load_target(spec: str) -> Any:
    """The object named by ``MODULE:ATTR`` (ATTR may be dotted), importing from the working directory
    too; MODULE may be a ``.py`` file's path, imported as a module of its directory.

    Raises:
        TargetImportError: the spec is malformed, the module does not import or has no such attribute.
    """
    module_name, sep, attr = spec.rpartition(":") if spec.count(":") > 1 else spec.partition(":")
    if not sep or not module_name or not attr:
        raise TargetImportError(f"expected MODULE:ATTR (e.g. mypkg.envs:MyEnv or my_env.py:MyEnv), received {spec!r}")
    path = None
    if module_name.endswith(".py"):  # a file: imported as a module of its own directory
        path = Path(module_name).expanduser()
        if not path.is_file():
            raise TargetImportError(f"cannot import {module_name!r}: no such file")
        if not path.stem.isidentifier():
            raise TargetImportError(f"cannot import {module_name!r}: {path.stem!r} is not a module name")
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_name = path.stem
    elif os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise TargetImportError(f"cannot import module {module_name!r}: {error}{install_hint(error)}") from error
    except ENV_ERRORS as error:  # sys.exit() in the module too: it would end marl-check with status 0
        relative = isinstance(error, ImportError) and "no known parent package" in str(error)
        hint = _package_hint(path, attr) if relative and path is not None else ""
        raise TargetImportError(
            f"importing module {module_name!r} raised {describe(error)}{hint}\n{format_exception(error)}"
        ) from error
    loaded = getattr(obj, "__file__", None)
    if path is not None and (loaded is None or Path(loaded).resolve() != path.resolve()):
        raise TargetImportError(f"cannot import {str(path)!r}: the module name {module_name!r} is taken by "
                                f"{loaded or obj!r}; rename the file")
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as error:
            raise TargetImportError(f"{module_name}:{attr}: {type(obj).__name__} {getattr(obj, '__name__', obj)!r} has no attribute {part!r}") from error
        except ENV_ERRORS as error:  # a module __getattr__ or a property that raises
            raise TargetImportError(
                f"{module_name}:{attr}: reading {part!r} raised {describe(error)}\n{format_exception(error)}"
            ) from error
    return obj


def _package_hint(path: Path, attr: str) -> str:
    """For a file inside a package (whose relative imports fail when the file is imported alone):
    how to name it as a module of its package instead; empty for a file in no package."""
    folder, parts = path.resolve().parent, [path.stem]
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1:
        return ""
    return (f"; {str(path)!r} is part of package {'.'.join(parts[:-1])!r}: name it as a module of its package, "
            f"`marl-check {'.'.join(parts)}:{attr}`, from {str(folder)!r}")


def _is_target(value: str) -> bool:
    """Whether a value in ``--skip``'s list is the target: rule ids never contain ``:``."""
    return value not in RULES and ":" in value


def _split_skip(parser: _Parser, args: argparse.Namespace) -> None:
    """Take the target back from ``--skip``, whose list also swallows a target written after it
    (``marl-check --skip pickle mypkg:Env``), and refuse unknown rule ids (exit status 2).

    Rule ids never contain ``:`` and a target always does, so the split is unambiguous.
    """
    rules = []
    for value in args.skip:
        if _is_target(value) and args.target is None:
            args.target = value
        else:
            rules.append(value)
    unknown = [value for value in rules if value not in RULES]
    if unknown:
        parser.error(
            f"--skip: unknown rule id(s) {', '.join(map(repr, unknown))}; the ids are: {', '.join(sorted(RULES))}"
        )
    args.skip = rules


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send what the env prints to stderr, so that stdout holds the JSON report alone: Python's
    ``sys.stdout``, and file descriptor 1 for what C code prints."""
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptor 1 to redirect
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            _flush_c_stdio()
            os.dup2(saved, 1)
            os.close(saved)


def _stdout_to_stderr_from_now() -> None:
    """Send everything printed from now on to stderr, so that the report stays alone on stdout."""
    sys.stdout.flush()
    try:
        os.dup2(2, 1)
    except OSError:  # no file descriptor to redirect
        return
    sys.stdout = sys.stderr


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so that what C code printed goes where it was redirected."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to reach: nothing buffered there for us
        return


def _failure(target: str | None, message: str) -> dict[str, Any]:
    """The JSON of a run that produced no report: the report's keys that mean something without
    one, so that ``"findings"`` stays iterable for a CI parser."""
    return {"target": target, "ok": False, "error": message, "findings": []}


def _fail(message: str, as_json: bool, target: str | None) -> int:
    print(f"marl-check: {message}", file=sys.stderr)
    if as_json:
        print(json.dumps(_failure(target, message), indent=2))
    return 2


def _stopped(stop: BaseException, args: argparse.Namespace) -> int:
    """Print what a check stopped by Ctrl-C or ``--timeout`` found until then; return the exit
    status: 130 for Ctrl-C; for the time limit 1 when errors were found by then, else 2."""
    interrupted = isinstance(stop, KeyboardInterrupt)
    why = "interrupted" if interrupted else (
        f"the check did not finish within --timeout {args.timeout:g} s (an env call that never returns, or an env "
        "too slow for the limit: raise --timeout, or lower --episodes or --max-steps)")
    partial = getattr(stop, "partial_report", None)
    if partial is None:  # stopped before the check began (importing or building the target)
        status = _fail(f"{why}; no report", args.json, args.target)
        return 130 if interrupted else status
    print(f"marl-check: {why}; the findings until then follow ({partial.stopped})", file=sys.stderr)
    print(json.dumps({**partial.to_dict(), "error": why}, indent=2) if args.json else str(partial))
    return 130 if interrupted else 1 if partial.errors else 2


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``sys.argv`` when ``argv`` is None, as the command does); return the
    exit status."""
    as_command = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    parser.json_errors = _wants_json(argv)
    args = parser.parse_args(argv, namespace=parser.parsed)
    _split_skip(parser, args)
    if args.list_rules:
        if args.json:
            print(json.dumps([dataclasses.asdict(rule) for rule in RULES.values()], indent=2))
        else:
            print(catalog_markdown(), end="")
        return 0
    args.as_command = as_command
    status = _check(args)
    if args.json and as_command:
        _stdout_to_stderr_from_now()  # the env's __del__ and atexit prints come after the report
    return status


def _check(args: argparse.Namespace) -> int:
    """Check the target; print the report (or why there is none); return the exit status."""
    if not args.target:
        return _fail("missing the target MODULE:ATTR (see marl-check --help)", args.json, None)
    logging.basicConfig(level=logging.WARNING, format="marl-check: %(message)s")
    if not args.timeout >= 0:
        return _fail(f"--timeout must be a number of seconds of at least 0, received {args.timeout}", args.json,
                     args.target)
    try:
        # The watchdog first: it keeps the stdout the JSON goes to before the env's prints are sent aside.
        with (_exit_if_stuck(args), _stdout_to_stderr() if args.json else contextlib.nullcontext(),
              _time_limit(args.timeout)):
            obj = _with_arguments(load_target(args.target), args)
            report = check_env(obj, seed=args.seed, episodes=args.episodes, max_steps=args.max_steps, skip=args.skip,
                               name=args.target)
    except (CheckInterrupted, KeyboardInterrupt) as stop:
        return _stopped(stop, args)
    except (TargetImportError, ConformanceError) as error:
        message = str(error)
        if getattr(error, "needs_arguments", False) and args.config is None and args.kwargs is None:
            message += _ARGUMENTS_HINT
        cause = error.__cause__
        if isinstance(error, ConformanceError) and cause is not None:
            message += "\n" + "".join(traceback.format_exception(cause)).rstrip()
        return _fail(message, args.json, args.target)
    except Exception as error:  # the checker's own failure: no report, and no "errors found" either
        trace = "".join(traceback.format_exception(error)).rstrip()
        return _fail(f"the check itself failed, a marl-check bug (please report it):\n{trace}", args.json, args.target)
    print(report.to_json() if args.json else str(report))
    return 0 if report.ok else 1
