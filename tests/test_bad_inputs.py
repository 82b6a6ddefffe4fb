"""The bad-input corpus (issue #9, item 1): every case of tests/bad_inputs/cases.yaml through the CLI.

Each case runs ``flows.cli.main`` in-process under the session Prefect harness on a copy of its folder
and checks the exit code, the words of the message (file, row, column or component), that a failed
run leaves no file in the output folder and its inputs untouched, and that a documented pass leaves
exactly one completed run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from crowdflow.contracts.missing import unexplained
from flows.cli import main

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
CASES: list[dict[str, Any]] = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))["cases"]


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if case.get("xfail") else []
        out.append(pytest.param(case, id=case["id"], marks=marks))
    return out


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_corpus_is_complete() -> None:
    """Every case folder is listed once, every listed case has a folder and the fields the test needs."""
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) >= 40
    folders = {p.name for p in CORPUS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders == set(ids)
    for c in CASES:
        assert set(c) <= {
            "id",
            "args",
            "exit",
            "stderr",
            "stdout",
            "outputs",
            "description",
            "xfail",
            "dry_run",
            "absent",
        }, c["id"]
        assert c["description"] and isinstance(c["exit"], int) and c["args"]
        assert c["exit"] == 0 or c.get("stderr"), f"{c['id']}: a failing case must name the words of its message"


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("case", _params())
def test_bad_input(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = (tmp_path / "case").resolve()
    shutil.copytree(CORPUS / case["id"], folder)
    out = (tmp_path / "out").resolve()
    before = _snapshot(folder)

    def fill(s: str) -> str:
        return s.replace("{case}", str(folder)).replace("{out}", str(out))

    rc = main([fill(a) for a in case["args"]])
    captured = capsys.readouterr()
    err, stdout = captured.err, captured.out
    assert rc == case["exit"], f"{case['id']}: exit {rc}\nstderr:\n{err[-3000:]}"
    for word in case.get("stderr", []):
        assert fill(word) in err, f"{case['id']}: {fill(word)!r} not in stderr:\n{err[-3000:]}"
    for word in case.get("stdout", []):
        assert fill(word) in stdout, f"{case['id']}: {fill(word)!r} not in stdout:\n{stdout[-2000:]}"
    assert "Traceback" not in err and "unexpected error" not in err
    for word in case.get("absent", []):  # e.g. a planted secret: never echoed
        assert word not in err + stdout, f"{case['id']}: {word!r} echoed"
    if case["exit"] != 0:
        assert err.count("crowdflow: error:") == 1
        leftovers = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
        assert leftovers == []
        assert _snapshot(folder) == before  # nothing written next to (or over) the inputs
    else:
        manifests = [*out.rglob("manifest.json"), *folder.rglob("manifest.json")]
        assert len(manifests) == 1
        assert json.loads(manifests[0].read_text())["status"] == "completed"
        for table in manifests[0].parent.glob("*.parquet"):  # the rule of crowdflow/contracts/missing.py, on every pass
            assert not unexplained(pd.read_parquet(table)), f"{case['id']}: {table.name}: non-finite without a reason"
        for table, checks in case.get("outputs", {}).items():  # what the description claims of the outputs
            df = pd.read_parquet(manifests[0].parent / f"{table}.parquet")
            for expr in checks:
                got = df.eval(expr, engine="python")
                ok = bool(got.all()) if isinstance(got, pd.Series) else bool(got)
                assert ok, f"{case['id']}: {table}: {expr!r} fails:\n{df.to_string()[:2000]}"
        assert {k: v for k, v in _snapshot(folder).items() if k in before} == before


def _dry_params() -> list[Any]:
    """Every case that runs a job: the same command with --dry-run (validate) must give the run's verdict."""
    return [pytest.param(c, id=c["id"]) for c in CASES if c["args"][0] not in ("validate",) and not c.get("xfail")]


@pytest.mark.parametrize("case", _dry_params())
def test_dry_run_gives_the_runs_verdict(
    case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--dry-run`` (the same checks as ``crowdflow validate``) exits as the run does, with the same words, and
    writes nothing. A failure that only the fit can find (a case's ``dry_run`` says why) passes the dry run."""
    folder = (tmp_path / "case").resolve()
    shutil.copytree(CORPUS / case["id"], folder)
    out = (tmp_path / "out").resolve()
    before = _snapshot(folder)

    def fill(s: str) -> str:
        return s.replace("{case}", str(folder)).replace("{out}", str(out))

    rc = main([*(fill(a) for a in case["args"]), "--dry-run"])
    err = capsys.readouterr().err
    fit_stage = case.get("dry_run")
    assert rc == (0 if fit_stage else case["exit"]), f"{case['id']}: exit {rc}\nstderr:\n{err[-3000:]}"
    if rc:
        for word in case.get("stderr", []):
            assert fill(word) in err, f"{case['id']}: {fill(word)!r} not in stderr:\n{err[-3000:]}"
    assert "Traceback" not in err and "unexpected error" not in err
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]
    assert _snapshot(folder) == before
