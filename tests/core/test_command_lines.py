"""What every command line shares: a reader that closes the output early ends it quietly."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from marl_core._cli import CLOSED_PIPE_STATUS, quiet_on_closed_pipe

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(sys.executable).parent
PRINTS_A_LOT = """
import sys
from marl_core._cli import quiet_on_closed_pipe

@quiet_on_closed_pipe
def main():
    for _ in range(10_000):
        print("a line of the report")
    return 0

sys.exit(main())
"""


def _with_closed_stdout(argv: list[str]) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        return subprocess.run(argv, cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        [str(SCRIPTS / "marl-check"), "pettingzoo.classic.tictactoe_v3:env", "--episodes", "1"],
        [str(SCRIPTS / "marl-check"), "pettingzoo.classic.tictactoe_v3:env", "--episodes", "1", "--json"],
        [sys.executable, "-c", PRINTS_A_LOT],
    ],
    ids=["marl-check", "marl-check --json", "a command printing a lot"],
)
def test_a_closed_output_pipe_ends_a_command_without_a_traceback(argv: list[str]) -> None:
    # `marl-check ... | head` ended with a BrokenPipeError traceback.
    done = _with_closed_stdout(argv)
    assert done.returncode == CLOSED_PIPE_STATUS, done.stderr
    assert done.stderr == ""


def test_every_command_line_ends_quietly_on_a_closed_pipe() -> None:
    commands = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.value.startswith(("marl_core", "bridges"))]
    assert sorted(e.name for e in commands) == ["marl-check", "marl-eval", "marl-matrix", "marl-play", "marl-train"]
    for command in commands:
        main = command.load()
        assert getattr(main, "__wrapped__", None) is not None and main.__code__ is quiet_on_closed_pipe(len).__code__, command.name
