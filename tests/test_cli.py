"""The installed console script (subprocess): fast help, validate without writing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _crowdflow() -> list[str]:
    exe = Path(sys.executable).with_name("crowdflow")
    return [str(exe)] if exe.exists() else [shutil.which("crowdflow") or "crowdflow"]


def test_help_does_not_import_prefect() -> None:
    code = (
        "import sys; from flows.cli import build_parser; build_parser(); "
        "print('prefect' in sys.modules, 'great_expectations' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False False"
    res = subprocess.run([*_crowdflow(), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "validate" in res.stdout and "skills" in res.stdout


def test_validate_example_spec(tmp_path: Path) -> None:
    res = subprocess.run(
        [*_crowdflow(), "validate", str(ROOT / "deployments/specs/rte-skills.yaml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "8000 rows, 7 expectations passed" in res.stdout and "1 components {'ok': 1}" in res.stdout
    assert list(tmp_path.iterdir()) == []


def test_bad_spec_exit_code(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nlabels: {path: missing.csv}\n")
    res = subprocess.run([*_crowdflow(), "validate", str(spec)], capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip() == f"crowdflow: error: {tmp_path / 'missing.csv'}: file not found"


@pytest.mark.parametrize("argv", [["run"], ["skills", "--labels", "x.csv"], ["nope"]])
def test_usage_errors(argv: list[str]) -> None:
    assert subprocess.run([*_crowdflow(), *argv], capture_output=True).returncode == 2
