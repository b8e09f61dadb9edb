"""Run logs: a CSV file, TensorBoard scalars and a learning-curve PNG, from the result dicts.

Nested result entries are flattened with ``/`` (``policies/main/episode_return_mean``); entries
added by callbacks (``result["evaluation"] = {...}``) are logged the same way. A key that first
appears in a later iteration adds a CSV column (the file is rewritten with the wider header).

Example:
    >>> from marl_core.ppo.progress import flatten
    >>> flatten({"policies": {"main": {"episode_return_mean": 1.0}}, "training_iteration": 3})
    {'policies/main/episode_return_mean': 1.0, 'training_iteration': 3}
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import math
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from marl_core.errors import RunLogError

logger = logging.getLogger(__name__)

_LEGEND_INSIDE = 10  # curves whose legend still fits inside the learning-curve plot


def write_atomic(path: Path, write: Callable[[Path], Any]) -> Path:
    """``write(tmp)`` a temporary file beside ``path`` (with its suffix, which writers such as
    matplotlib read the format from), then rename it into place: a crash or an interrupt leaves
    the old file or the new one, never a part of either."""
    path = Path(path)
    tmp = path.parent / f".{path.stem}.tmp-{uuid.uuid4().hex[:8]}{path.suffix}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` with :func:`write_atomic`."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="") as handle:
            handle.write(text)

    return write_atomic(path, write)


def keep_until(entries: list[Any], iteration: int, iteration_of: Callable[[Any], Any], path: Path) -> list[Any]:
    """The entries of a run's log (``path``) up to ``iteration``, a resumed run's checkpoint: the
    later ones are trained again from there, so they go (with a warning)."""
    kept = [entry for entry in entries
            if not isinstance(at := iteration_of(entry), int) or at <= iteration]
    if len(kept) < len(entries):
        logger.warning("%s: dropped %d entries after iteration %d, which is trained again from its checkpoint",
                       path, len(entries) - len(kept), iteration)
    return kept


def _read_csv(path: Path, complete: Callable[[str], str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns and rows of the CSV log ``path`` (its text passed through ``complete`` first).

    Raises:
        RunLogError: it cannot be read back.
    """
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            text = complete(handle.read())
        reader = csv.DictReader(io.StringIO(text, newline=""))
        columns = list(reader.fieldnames or [])
        rows = [{k: _number(v) for k, v in row.items() if k is not None and v not in ("", None)} for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RunLogError(f"{path} cannot be read back: {error}") from error
    return columns, rows


def complete_lines(text: str, path: Path) -> str:
    """``text`` up to its last newline: a last line that a crash cut short is dropped (with a warning)."""
    if text and not text.endswith("\n"):
        logger.warning("%s: its last line was cut short; dropped", path)
        return text[: text.rfind("\n") + 1]
    return text


def _evaluation_repeat(key: str) -> bool:
    """An evaluation figure the learning curve leaves out: evaluate()'s whole-episode, per-agent,
    RLlib-named, min and max figures (its per-policy means are drawn)."""
    return (key.startswith(("evaluation/env_runners/", "evaluation/agent_episode_returns_mean/",
                            "evaluation/episode_return_")) or key.endswith(("_min", "_max")))


def flatten(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> one level with ``/``-joined keys; only numbers, bools and strings kept."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "/"))
        elif isinstance(value, (int, float, str, bool)) or hasattr(value, "item"):
            out[name] = value.item() if hasattr(value, "item") else value
    return out


def _number(text: str) -> Any:
    """A CSV cell back as the int or float it was written from; other text stays text."""
    for kind in (int, float):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


class RunLogger:
    """Writes ``progress.csv``, TensorBoard event files (``tb/``) and ``learning_curve.png``.

    ``resume_at=i`` continues the logs of a run restored from a checkpoint taken at iteration
    ``i``: the rows of iterations up to ``i`` already in ``progress.csv`` are kept (read back as
    numbers where they are numbers) and new rows follow them; rows of later iterations (trained
    after that checkpoint, and trained again now) and a last line cut short by a crash are
    dropped, and TensorBoard hides its events from there on (``purge_step``).

    The file is rewritten whole (when a column is added) through a temporary file, so a crash
    never leaves a part of it. Nothing is written before :meth:`start` (called by the first
    :meth:`log` at the latest): a resume that stops before it leaves the logs as they were.

    Raises:
        RunLogError: ``progress.csv`` cannot be read back (unreadable, or not UTF-8 CSV).
        OSError: ``out_dir`` or its ``tb`` directory cannot be made (a file in the way, say).
    """

    def __init__(self, out_dir: str | Path, tensorboard: bool = True, *, resume_at: int | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.out_dir / "progress.csv"
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] = []
        self._purge_step: int | None = None
        self._cut = False  # rows of later iterations to drop from the file, at start()
        if resume_at is not None and self.csv_path.is_file():
            self._read_back(resume_at)
            self._cut = True
            # log() numbers TensorBoard steps by env steps (by row count without them).
            last = self.rows[-1] if self.rows else {}
            self._purge_step = int(last.get("num_env_steps_sampled_lifetime", len(self.rows))) + 1 if last else 0
        self._tensorboard = tensorboard
        if tensorboard:
            (self.out_dir / "tb").mkdir(exist_ok=True)  # a file in the way fails here, not at the first row
        self.writer = None
        self.started = False

    def start(self) -> None:
        """Begin writing: a resumed log drops the rows of later iterations from the file, and
        TensorBoard hides their events (idempotent)."""
        if self.started:
            return
        self.started = True
        if self._cut:
            self._rewrite()
            self._cut = False
        if self._tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.out_dir / "tb"), purge_step=self._purge_step)

    @staticmethod
    def check_resume(out_dir: str | Path) -> None:
        """Read ``progress.csv`` in ``out_dir`` as ``RunLogger(out_dir, resume_at=...)`` would,
        changing nothing: a resume can refuse unreadable logs before anything else is touched.

        Raises:
            RunLogError: it cannot be read back.
        """
        csv_path = Path(out_dir) / "progress.csv"
        if csv_path.is_file():
            _read_csv(csv_path, lambda text: text)

    def _read_back(self, resume_at: int) -> None:
        columns, rows = _read_csv(self.csv_path, lambda text: complete_lines(text, self.csv_path))
        if not columns:
            logger.warning("%s has no header line to continue; starting it again", self.csv_path)
            return
        self.columns = columns
        self.rows = keep_until(rows, resume_at, lambda row: row.get("training_iteration"), self.csv_path)

    def log(self, result: Mapping[str, Any]) -> None:
        """Append one iteration's result to the CSV and TensorBoard."""
        self.start()
        row = flatten(result)
        self.rows.append(row)
        new = [key for key in row if key not in self.columns]
        if new:
            self.columns.extend(new)
            self._rewrite()
        else:
            with self.csv_path.open("a", newline="") as handle:
                self._write_rows(handle, [row], header=False)
        if self.writer is not None:
            step = int(row.get("num_env_steps_sampled_lifetime", len(self.rows)))
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self.writer.add_scalar(key, value, step)
            self.writer.flush()

    def _rewrite(self) -> None:
        """The whole file again (a wider header), replaced atomically."""
        buffer = io.StringIO(newline="")
        self._write_rows(buffer, self.rows, header=True)
        write_text_atomic(self.csv_path, buffer.getvalue())

    def _write_rows(self, handle: Any, rows: list[dict[str, Any]], header: bool) -> None:
        writer = csv.DictWriter(handle, fieldnames=self.columns)
        if header:
            writer.writeheader()
        writer.writerows(rows)

    def plot(self, path: str | Path | None = None, title: str = "") -> Path:
        """Save the learning curve (episode return mean per policy against env steps)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        path = Path(path) if path is not None else self.out_dir / "learning_curve.png"
        steps = [row.get("num_env_steps_sampled_lifetime", i) for i, row in enumerate(self.rows)]
        figure, axis = plt.subplots(figsize=(7, 4))
        for key in self.columns:
            if key.startswith("policies/") and key.endswith("/episode_return_mean"):
                values = [row.get(key, float("nan")) for row in self.rows]
                axis.plot(steps, values, label=key[len("policies/"):-len("/episode_return_mean")])  # ids may hold "/"
            elif key.startswith("evaluation/") and "return" in key and not _evaluation_repeat(key):
                axis.plot(steps, [row.get(key, float("nan")) for row in self.rows], "--", label=key)
        axis.set_xlabel("env steps")
        axis.set_ylabel("episode return (mean of last 100)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        lines = len(axis.get_legend_handles_labels()[0])
        if lines > _LEGEND_INSIDE:  # a league's snapshots come and go: dozens of lines, beside the plot
            axis.legend(fontsize="x-small", ncol=math.ceil(lines / 24), loc="upper left", bbox_to_anchor=(1.01, 1.0))
        elif lines:
            axis.legend()
        try:  # bbox "tight": room for the title, labels and legend
            return write_atomic(path, lambda tmp: figure.savefig(tmp, dpi=100, bbox_inches="tight"))
        finally:
            plt.close(figure)

    def close(self) -> None:
        """Flush and close the TensorBoard writer."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
