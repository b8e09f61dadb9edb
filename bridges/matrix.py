"""``marl-matrix``: run the conformance suite over every case table and write ``compat_matrix.md``.

Every row of the case tables in :mod:`bridges.compat` (PettingZoo AEC and parallel, OpenSpiel,
RLlib's example envs, Gymnasium) runs in its own process, ``--jobs`` at a time, with a per-row
timeout, so a crash or a hang fails only that row. A row records the source API, the bridge,
``check_env``'s errors and warnings, a round trip through the source API's own tooling
(PettingZoo's ``api_test`` / ``parallel_api_test`` on the bridged env exported back by
``MultiAgentAECEnv`` / ``MultiAgentParallelEnv``, so that both directions of the bridge run; the
equivalence of turns, legal actions and returns against raw pyspiel playing the moves sent to the
bridge; RLlib's own env checker on ``to_rllib``; Gymnasium's ``check_env`` on ``to_gymnasium``),
the per-action overhead against the raw env, and the reason for any gap. The file is generated,
never edited.

Run: ``marl-matrix`` (all rows) or ``python -m bridges.matrix --subset fast --jobs 2``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import io
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from bridges.compat import Case
from bridges.matrix_probes import overhead, round_trip
from marl_core._cli import number_arg, quiet_on_closed_pipe
from marl_core.errors import install_hint

logger = logging.getLogger(__name__)

TABLES = (
    "bridges.compat.pettingzoo_cases",
    "bridges.compat.openspiel_cases",
    "bridges.compat.rllib_cases",
    "bridges.compat.gymnasium_cases",
)
UPSTREAM = (
    "gymnasium", "numpy", "pettingzoo", "mpe2", "open_spiel", "shimmy", "supersuit", "ray", "torch", "pygame",
    "pygame-ce", "chess", "rlcard", "box2d", "Box2D",
)
EPISODES = 3
DEFAULT_MAX_STEPS = 500
EXIT_SECONDS = 5.0  # how long a row's process may take to exit once it has sent its row
FAST_PER_SOURCE = 2
HEADER = "| case | source API | bridge | errors | warnings | rules with findings | round trip | µs/action raw | µs/action bridged | overhead | gap |"
DETERMINISTIC = ("case", "source", "bridge", "errors", "warnings", "rules", "round_trip", "gap")


@dataclass(frozen=True)
class Row:
    """One line of the matrix."""

    case: str
    source: str
    bridge: str = ""
    errors: str = ""
    warnings: str = ""
    rules: str = ""
    round_trip: str = ""
    raw_us: str = ""
    bridged_us: str = ""
    overhead: str = ""
    gap: str = ""

    def markdown(self) -> str:
        cells = [f"`{self.case}`", *(getattr(self, f.name) for f in fields(self)[1:])]
        return "| " + " | ".join(_cell(c) for c in cells) + " |"

    @classmethod
    def parse(cls, line: str) -> Row:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        cells[0] = cells[0].strip("`")
        return cls(*(c.replace("\\|", "|") for c in cells))

    def deterministic(self) -> tuple[str, ...]:
        """The columns that do not depend on timing."""
        return tuple(getattr(self, name) for name in DETERMINISTIC)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# Case tables -----------------------------------------------------------------------------------


def load_cases() -> tuple[list[Case], list[str]]:
    """Every case of every table, and the tables that could not be imported (with the reason)."""
    cases: list[Case] = []
    missing: list[str] = []
    for table in TABLES:
        try:
            cases.extend(importlib.import_module(table).CASES)
        except Exception as error:  # a broken table must not hide the others
            missing.append(f"{table}: {type(error).__name__}: {error}")
    return cases, missing


def fast_subset(cases: Sequence[Case]) -> list[Case]:
    """The first :data:`FAST_PER_SOURCE` runnable, non-slow cases of each source, in table order."""
    taken: dict[str, int] = {}
    chosen = []
    for case in cases:
        if case.left_out is None and not case.slow and taken.get(case.source, 0) < FAST_PER_SOURCE:
            taken[case.source] = taken.get(case.source, 0) + 1
            chosen.append(case)
    return chosen


def factory_of(case: Case) -> Callable[..., Any]:
    """The callable that ``case.target`` (``"module:attr"``) names."""
    module, _, attr = case.target.partition(":")
    return getattr(importlib.import_module(module), attr)


def build(case: Case) -> Any:
    """A fresh bridged env (our MultiAgentEnv) for ``case``."""
    if case.source == "openspiel":
        from bridges.openspiel import OpenSpielEnv

        return OpenSpielEnv(case.target, **dict(case.kwargs))
    raw = factory_of(case)(**dict(case.kwargs))
    if case.source == "pettingzoo-aec":
        from bridges.pettingzoo import PettingZooEnv

        return PettingZooEnv(raw)
    if case.source == "pettingzoo-parallel":
        from bridges.pettingzoo import ParallelPettingZooEnv

        return ParallelPettingZooEnv(raw)
    if case.source == "rllib":
        from bridges.rllib import from_rllib

        return from_rllib(raw)
    from bridges.wrapping import wrap

    return wrap(raw)


class _Builder:
    """A picklable zero-argument factory for ``case`` (the checker may pickle it)."""

    def __init__(self, case: Case) -> None:
        self.case = case

    def __call__(self) -> Any:
        return build(self.case)


# One row ---------------------------------------------------------------------------------------


def run_case(case: Case) -> Row:
    """Measure one case (in the calling process; :func:`run_all` gives each its own)."""
    if case.left_out is not None:
        return Row(case.id, case.source, gap=f"left out: {case.left_out}")
    from marl_core.conformance import check_env

    env = build(case)
    bridge = type(env).__name__
    env.close()
    report = check_env(_Builder(case), seed=0, episodes=EPISODES, max_steps=case.max_steps or DEFAULT_MAX_STEPS)
    trip = round_trip(case, build)
    raw_us, bridged_us = overhead(case, build)
    gap = ""
    if report.errors:
        first = report.errors[0]
        gap = f"{first.rule}: {first.message.splitlines()[0]}"
    elif trip.startswith("fail"):
        gap = trip
    return Row(
        case.id,
        case.source,
        bridge=bridge,
        errors=str(len(report.errors)),
        warnings=str(len(report.warnings)),
        rules=", ".join(sorted(report.rules)) or "-",
        round_trip=trip,
        raw_us="-" if raw_us is None else f"{raw_us:.1f}",
        bridged_us=f"{bridged_us:.1f}",
        overhead="-" if raw_us is None else f"{bridged_us / raw_us:.2f}x",
        gap=_with_notes(case, _short(gap, 240)),
    )


def _with_notes(case: Case, gap: str) -> str:
    """A row's gap cell: ``gap`` (``-``: none), then the case's notes."""
    return (gap or "-") + (f" (note: {case.notes})" if case.notes else "")


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _child(case: Case, connection: Any) -> None:
    if hasattr(os, "setsid"):  # its own process group: whatever the env starts goes with it (_kill)
        os.setsid()
    with open(os.devnull, "w") as devnull:  # what C code or a subprocess prints, too
        os.dup2(devnull.fileno(), 1)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            row = run_case(case)
    except BaseException as error:
        last = traceback.extract_tb(error.__traceback__)[-1]
        hint = install_hint(error)
        what = f"left out: this install lacks a module{hint}" if hint else "crashed"
        row = Row(case.id, case.source, gap=_with_notes(case, _short(
            f"{what}: {type(error).__name__}: {error} (at {Path(last.filename).name}:{last.lineno})", 240)))
    connection.send(asdict(row))
    connection.close()


_PRELOAD = {
    "pettingzoo-aec": ("bridges.pettingzoo", "pettingzoo.test"),
    "pettingzoo-parallel": ("bridges.pettingzoo", "pettingzoo.test"),
    "openspiel": ("bridges.openspiel",),
    "rllib": ("bridges.rllib", "ray.rllib.utils.pre_checks.env"),
    "gymnasium": ("bridges.gymnasium",),
}


def _preload(cases: Sequence[Case]) -> None:
    """Import the bridges the rows need once, so that forked rows do not each pay for it."""
    for module in dict.fromkeys(m for case in cases for m in _PRELOAD.get(case.source, ())):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(module)
        except Exception as error:  # the row itself will report the failure
            logger.debug("could not preload %s: %s", module, error)


@dataclass
class _Running:
    """A row's process while it runs, and its row once the row has arrived."""

    case: Case
    process: Any
    receiver: Any
    started: float
    row: Row | None = None
    arrived: float = 0.0


def run_all(cases: Sequence[Case], *, jobs: int = 2, timeout: float = 900.0,
            progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Run every case in its own process, ``jobs`` at a time; rows come back in ``cases`` order.

    A row's process has ``timeout`` seconds to send its row, and then :data:`EXIT_SECONDS` to
    exit; one still running after that (a thread left behind that keeps it alive) is killed, and
    its row kept with a note saying so. Processes a row's env started (its process group) are
    killed once the row is done, and every row's when the run stops early (Ctrl-C).
    """
    fork = hasattr(os, "fork")
    context = multiprocessing.get_context("fork" if fork else "spawn")
    if fork:
        _preload(cases)
    pending = list(cases)
    running: dict[str, _Running] = {}
    results: dict[str, Row] = {}

    def finish(run: _Running, row: Row) -> None:
        run.receiver.close()
        del running[run.case.id]
        results[run.case.id] = row
        if progress is not None:
            progress(row)

    try:
        with _terminations_interrupt():
            _run_rows(context, pending, running, finish, jobs, timeout)
    finally:
        for run in running.values():  # stopped early: no row's processes outlive the run
            _kill(run.process)
            run.process.join()
    return [results[case.id] for case in cases]


@contextlib.contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (``timeout``, a CI cancel, a closed terminal) as Ctrl-C: rows run in
    their own process groups, which such signals to ours no longer reach, so they must be killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    names = [name for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {name: signal.signal(getattr(signal, name), interrupt) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _run_rows(context: Any, pending: list[Case], running: dict[str, _Running],
              finish: Callable[[_Running, Row], None], jobs: int, timeout: float) -> None:
    """:func:`run_all`'s loop: start rows, ``jobs`` at a time, and finish each."""
    while pending or running:
        while pending and len(running) < max(1, jobs):
            case = pending.pop(0)
            receiver, sender = context.Pipe(duplex=False)
            # Not daemonic: an env may start processes of its own (multiprocessing refuses them to daemons).
            process = context.Process(target=_child, args=(case, sender))
            process.start()
            sender.close()
            running[case.id] = _Running(case, process, receiver, time.monotonic())
        for run in list(running.values()):
            case, process = run.case, run.process
            if run.row is None and run.receiver.poll():
                with contextlib.suppress(EOFError):  # EOF: the process ended without sending its row
                    run.row = Row(**run.receiver.recv())
                    run.arrived = time.monotonic()
            if run.row is not None:
                # Waiting here without a limit would let one process that cannot exit hang the run.
                if process.is_alive() and time.monotonic() - run.arrived <= EXIT_SECONDS:
                    continue
                row = run.row
                if process.is_alive():
                    note = f"(process killed: still running {_seconds(EXIT_SECONDS)} s after sending its row)"
                    row = replace(row, gap=f"{row.gap or '-'} {note}")
                _kill(process)
                process.join()
                finish(run, row)
                continue
            if process.is_alive() and time.monotonic() - run.started <= timeout:
                continue
            if process.is_alive():
                row = Row(case.id, case.source, gap=_with_notes(case, f"timeout: no result within {_seconds(timeout)} s"))
            else:
                row = Row(case.id, case.source,
                          gap=_with_notes(case, f"crashed: the row's process exited with code {process.exitcode}"))
            _kill(process)
            process.join()
            finish(run, row)
        time.sleep(0.02)


def _kill(process: Any) -> None:
    """Kill a row's process, if still running, and whatever its env started (its process group,
    which outlives it when its env left processes behind)."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # no group left (or not made yet)
            os.killpg(process.pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()


def _seconds(value: float) -> str:
    """``value`` seconds as text: whole seconds from 100 s up, else three significant digits
    (``0.5``, not the ``0`` that rounding to whole seconds would print)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


# The file --------------------------------------------------------------------------------------


def versions() -> list[tuple[str, str]]:
    """(distribution, version) of every installed upstream package the matrix depends on."""
    seen: dict[str, str] = {"python": sys.version.split()[0]}
    for name in UPSTREAM:
        with contextlib.suppress(metadata.PackageNotFoundError):
            dist = metadata.distribution(name)
            seen.setdefault(dist.metadata["Name"], dist.version)
    return sorted(seen.items(), key=lambda item: item[0].lower())


def _status(row: Row) -> str:
    if row.gap.startswith("left out"):
        return "left out"
    return "clean" if row.errors == "0" and not row.round_trip.startswith("fail") else "gap"


def render(rows: Sequence[Row], *, subset: str, missing: Sequence[str], seconds: float, ran: int | None = None) -> str:
    """The Markdown text of the matrix; ``ran`` rows of ``rows`` (all by default) took ``seconds``."""
    counts = {"clean": 0, "gap": 0, "left out": 0}
    for row in rows:
        counts[_status(row)] += 1
    lines = [
        "# Compatibility matrix",
        "",
        "Generated by `marl-matrix` (`python -m bridges.matrix`); do not edit by hand. "
        f"Subset: `{subset}`; {len(rows) if ran is None else ran} rows run in {seconds:.0f} s on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}.",
        "",
        "## Upstream versions",
        "",
        "| package | version |",
        "|---|---|",
        *(f"| {name} | {version} |" for name, version in versions()),
        "",
        "## How to read a row",
        "",
        f"- **errors / warnings / rules**: `marl_core.conformance.check_env` on the bridged env, seed 0, {EPISODES} "
        f"episodes, at most the case's `max_steps` (default {DEFAULT_MAX_STEPS}) steps each.",
        "- **round trip**: PettingZoo's `api_test` on `MultiAgentAECEnv(PettingZooEnv(env))` or `parallel_api_test` "
        "on `MultiAgentParallelEnv(ParallelPettingZooEnv(env))`: the bridged env exported back to PettingZoo, so "
        "both directions of the bridge run (`to_aec` / `to_parallel` would hand back `env` itself); "
        "for OpenSpiel, turns, legal actions, the actions the bridge's game took and returns compared with raw "
        "pyspiel playing the actions sent to the bridge (and the chance outcomes it drew); for RLlib, RLlib's "
        "`check_multiagent_environments` on `to_rllib(...)` of the bridged env; "
        "for Gymnasium, Gymnasium's `check_env` on `to_gymnasium(...)` of a one-agent version.",
        "- **µs/action**: wall time per agent action over seeded random (legal) play, raw API loop vs the bridged "
        "env, alternated in one process and the median of 5 rounds taken. For pyspiel both arms draw Python-int "
        "actions the same way (`random.Random`), the raw one from `legal_actions()`, the bridged one from the mask; "
        "the raw arm reads the acting players' observations as the bridge does (the observer of `make_observation` "
        "and its `set_from(state, player)`, or the state's method where the bridge uses that), the rewards of each "
        "step in games that pay them before the end, and at the end the returns and every player's observation. "
        "Timing columns vary from run to run and the "
        "machine was shared with other work while they were taken: read the ratio, not the absolute figures.",
        "- **gap**: why a row is not clean: the first error's rule and message, a round-trip failure, a crash, a "
        "timeout, or why the case is left out; `-` when clean; then the case's notes, and whether the row's "
        f"process had to be killed because it had not exited {_seconds(EXIT_SECONDS)} s after sending its row.",
        "",
        f"Summary: {counts['clean']} clean, {counts['gap']} with gaps, {counts['left out']} left out.",
        "",
    ]
    if missing:
        lines += ["Case tables that could not be loaded:", "", *(f"- {m}" for m in missing), ""]
    lines += ["## Rows", "", HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    lines += [row.markdown() for row in rows]
    return "\n".join(lines) + "\n"


def read_rows(text: str) -> list[Row]:
    """The rows of a matrix file written by :func:`render`."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2
    return [Row.parse(line) for line in lines[start:] if line.startswith("| `")]


@quiet_on_closed_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """The ``marl-matrix`` command line."""
    parser = argparse.ArgumentParser(prog="marl-matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", choices=("all", "fast"), default="all",
                        help="all: every case; fast: the first runnable non-slow cases of each source")
    parser.add_argument("--jobs", type=number_arg(int), default=2, help="rows run at once, each in its own process")
    parser.add_argument(
        "--timeout", type=number_arg(float), default=900.0,
        help="seconds a row may take (default 900: bridge_uncontested_bidding needs about 350 s alone)",
    )
    parser.add_argument("--only", default=None, help="run only cases whose id contains this text")
    parser.add_argument("--output", default="compat_matrix.md",
                        help="where to write the Markdown; a partial run (--subset fast, --only) replaces "
                        "its rows in an existing file and keeps the others")
    args = parser.parse_args(argv)
    all_cases, missing = load_cases()
    cases = fast_subset(all_cases) if args.subset == "fast" else all_cases
    if args.only:
        cases = [case for case in cases if args.only in case.id]
    if not cases:
        outside = bool(args.only) and args.subset == "fast" and any(args.only in case.id for case in all_cases)
        where = " in the fast subset (drop --subset fast to run it)" if outside else ""
        print(f"marl-matrix: no case id{where} contains {args.only!r}; nothing run, {args.output} left as it is",
              file=sys.stderr)
        return 2
    output = Path(args.output)
    unwritable = _why_unwritable(output)
    if unwritable:  # before the rows run, not after minutes of them
        print(f"marl-matrix: cannot write {args.output}: {unwritable}; nothing run", file=sys.stderr)
        return 2
    started = time.monotonic()

    def progress(row: Row) -> None:
        status = row.gap if row.gap and not row.gap.startswith("-") else "clean"
        print(f"{row.case}: {row.errors or '-'} errors, {row.overhead or '-'} overhead; {status[:100]}", flush=True)

    try:
        rows = run_all(cases, jobs=args.jobs, timeout=args.timeout, progress=progress)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: every row's processes are gone by now
        print(f"\nmarl-matrix: interrupted; {args.output} left as it was", file=sys.stderr)
        return 130
    ran = len(rows)
    subset = args.subset if not args.only else f"{args.subset}, --only {args.only}"
    if len(cases) < len(all_cases) and output.is_file():
        rows, subset = _merged(output, rows, all_cases, subset)
    text = render(rows, subset=subset, missing=missing, seconds=time.monotonic() - started, ran=ran)
    output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}: {len(rows)} rows")
    return 0


def _why_unwritable(output: Path) -> str | None:
    """Why ``output`` cannot be written (None: it can): a directory, or a folder that is missing
    or not writable."""
    if output.is_dir():
        return "it is a directory"
    folder = output.parent
    if not folder.is_dir():
        return f"there is no folder {folder}"
    if not os.access(folder, os.W_OK) or (output.exists() and not os.access(output, os.W_OK)):
        return "no permission to write there"
    return None


def _merged(output: Path, rows: list[Row], cases: Sequence[Case], subset: str) -> tuple[list[Row], str]:
    """The rows of the matrix file ``output`` with ``rows`` (a partial run) in place of their old
    versions, in case-table order; and the subset label that says so.

    ``cases`` are the cases of the tables that loaded: an old row whose case is no longer in them
    is dropped, unless no loaded case has its source (its table did not load this time, so
    nothing says the case is gone).
    """
    try:
        old = read_rows(output.read_text(encoding="utf-8"))
    except ValueError:  # not a matrix file: write the partial run alone
        return rows, subset
    order = {case.id: index for index, case in enumerate(cases)}
    sources = {case.source for case in cases}
    kept = {row.case: row for row in old if row.case in order or row.source not in sources}
    dropped = len(old) - len(kept)
    kept.update({row.case: row for row in rows})
    merged = sorted(kept.values(), key=lambda row: (order.get(row.case, len(order)), row.case))
    label = f"{len(rows)} rows rerun ({subset}), the other {len(merged) - len(rows)} kept from the last run"
    if dropped:
        label += f"; {dropped} rows of cases no longer in the case tables dropped"
    return merged, label


if __name__ == "__main__":
    sys.exit(main())
