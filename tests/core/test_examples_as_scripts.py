"""Every example runs as its docstring says, ``python examples/NAME.py``, from any directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "examples").glob("*.py") if p.name != "__init__.py")


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_an_example_starts_as_a_script_outside_the_repository(path: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(path), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
