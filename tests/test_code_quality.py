"""Guard rails run with the tests (issue #11): ruff lint + format, mypy, and the layer contracts.

The contracts (pyproject.toml [tool.importlinter]): crowdflow/ never imports prefect,
great_expectations, tasks or flows; layers flows -> tasks -> schemas -> crowdflow; no import cycle
between the modules of a job package.
mypy (pyproject.toml [tool.mypy]) is strict on crowdflow/, tasks/, flows/ and schemas/; its incremental
cache lives in .mypy_cache/ (gitignored): ~40 s of CPU on a fresh checkout, ~2 s once warm.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")])
def test_ruff(args: tuple[str, ...]) -> None:
    res = _run(sys.executable, "-m", "ruff", *args)
    assert res.returncode == 0, res.stdout + res.stderr


def test_layer_contracts() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    res = _run(str(exe))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_mypy() -> None:
    res = _run(sys.executable, "-m", "mypy")
    assert res.returncode == 0, res.stdout + res.stderr
