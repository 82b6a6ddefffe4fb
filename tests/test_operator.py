"""The operator-error rule of deployment runs (flows/operator.py), without a server: the one-line state message, the
pull step's checks of the project folder, and bugs left to Prefect. ``tests/test_server.py`` runs it on a worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crowdflow.contracts.errors import InputError, SpecError, TransientError
from flows.operator import ENTRY_POINT, enter_project, failed_state, one_line

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "text",
    ["a", "a\nb", "  lead\r\n\ttrail  ", "x" * 2000, "line1\n\nline2\n" * 100, "ü\u00a0é"],
)
def test_one_line_has_no_line_break_and_keeps_the_start(text: str) -> None:
    line = one_line(text)
    assert "\n" not in line and "\r" not in line and len(line) <= 600
    first = line.split(" ")[0].rstrip("…")
    assert first and text.split()[0].startswith(first)
    assert (len(line) < 600) == (len(" ".join(text.split())) < 600)  # cut only when longer


def test_expected_failures_become_failed_states_with_one_line() -> None:
    for exc in (
        SpecError("runner.kind dask needs the 'dask' extra\n(distributed is not installed)"),
        InputError("/data/labels.csv: file not found"),
        TransientError("postgresql://u@h/db: cannot reach the database:\nconnection refused"),
        OSError(28, "No space left on device", "/out/x.parquet"),
    ):
        state = failed_state(exc)
        assert state.is_failed() and "\n" not in (state.message or "")
        assert state.message.split(":")[0] in {"SpecError", "InputError", "TransientError", "ResourceError"}
    with pytest.raises(ZeroDivisionError):  # a bug stays a bug: Prefect reports it with its traceback
        failed_state(ZeroDivisionError("x"))


def test_the_pull_step_enters_the_project_or_says_what_to_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT__FLOW_RUN_ID", raising=False)
    here = os.getcwd()
    try:
        assert enter_project(str(ROOT)) == {"directory": str(ROOT)} and (Path.cwd() / ENTRY_POINT).is_file()
        with pytest.raises(SpecError, match=r"project folder not found on worker host .*no-such.*prefect variable set"):
            enter_project(str(tmp_path / "no-such"))
        with pytest.raises(SpecError, match=r"is not a crowdflow project folder \(no flows/deploy.py\)"):
            enter_project(str(tmp_path))
        (tmp_path / "file").write_text("x")
        with pytest.raises(SpecError, match="project folder not found"):
            enter_project(str(tmp_path / "file"))
        os.chdir(tmp_path)
        with pytest.raises(SpecError, match="crowdflow_project_dir is not set"):
            enter_project("")  # the Variable is missing: Prefect renders it as an empty folder name
    finally:
        os.chdir(here)
