"""The skills pipeline end to end under a temporary Prefect API (issue #2 acceptance checks)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import crowdflow as cf
from crowdflow.spec import parse_spec
from flows.cli import main

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def _runs(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("manifest.json"))


def _files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file()) if out.exists() else []


def test_rte_mv_run(tmp_path: Path, rte_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(
        [
            "skills",
            "--labels",
            str(rte_dir / "labels.csv"),
            "--truth",
            str(rte_dir / "truth.csv"),
            "--method",
            "mv",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    (manifest_path,) = _runs(out)
    man = json.loads(manifest_path.read_text())
    assert man["status"] == "completed" and man["method"] == "mv"
    assert 0.093 <= man["metrics"]["error"] <= 0.135 and man["metrics"]["n_gold"] == 800
    # the library's own answer on the same rows (the seeded tie draw by task id, docs/methods/skills.md §2.7)
    lib = cf.skills(
        pd.read_csv(rte_dir / "labels.csv", dtype=str), pd.read_csv(rte_dir / "truth.csv", dtype=str), method="mv"
    )
    assert man["metrics"]["error"] == pytest.approx(lib.metrics["error"], abs=1e-12)
    assert {i["name"]: i["rows"] for i in man["inputs"]} == {"labels": 8000, "truth": 800}
    assert len(man["inputs"][0]["sha256"]) == 64
    assert set(man["outputs"]) == {"consensus", "skills", "components", "gold_workers", "gold_confusion", "report"}
    assert man["outputs"]["report"]["path"] == "report.html" and (manifest_path.parent / "report.html").is_file()
    assert set(man["timings"]) == {"ingest_validate", "check_graph", "fit", "report"}  # export ends after the manifest
    consensus = pd.read_parquet(manifest_path.parent / "consensus.parquet")
    assert list(consensus.columns) == ["task", "label", "confidence", "n_labels", "fallback", "missing_reason"]
    assert len(consensus) == 800 and consensus["missing_reason"].isna().all()
    assert (consensus["n_labels"] == 10).all()
    # confidence = the winning label's share of the task's votes, recounted from the input file
    raw = pd.read_csv(rte_dir / "labels.csv", dtype=str)
    counts = raw.groupby(["task", "label"]).size()
    won = counts.reindex(pd.MultiIndex.from_frame(consensus[["task", "label"]])).to_numpy()
    np.testing.assert_allclose(consensus["confidence"].to_numpy(), won / 10, rtol=0, atol=1e-12)
    assert f"accuracy {1 - lib.metrics['error']:.4f}" in capsys.readouterr().out  # the printed accuracy, 4 digits


def test_rte_pgd_run(tmp_path: Path, rte_dir: Path) -> None:
    """Issue #3 in the pipeline: rank-one PGD skills on RTE (paper Table 5: 0.07; docs/methods/skills.md §6 AT-R1: <= 0.09)."""
    out = tmp_path / "out"
    rc = main(
        [
            "skills",
            "--labels",
            str(rte_dir / "labels.csv"),
            "--truth",
            str(rte_dir / "truth.csv"),
            "--method",
            "pgd",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    (manifest_path,) = _runs(out)
    man = json.loads(manifest_path.read_text())
    assert man["metrics"]["error"] <= 0.09 and man["fit"]["converged"] and man["fit"]["solver"] == "scaled"
    skills = pd.read_parquet(manifest_path.parent / "skills.parquet")
    assert len(skills) == 164 and (skills["status"] == "ok").all()
    assert skills["skill"].between(-1, 1).all() and skills["skill"].mean() > 0.3
    comps = pd.read_parquet(manifest_path.parent / "components.parquet")
    assert comps.loc[0, "lambda_min_signless_unit"] > 0 and not comps.loc[0, "bipartite"]


def test_missing_worker_column_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "labels.csv"
    bad.write_text("task,annotator,label\nt1,a,1\nt1,b,0\n")
    out = tmp_path / "out"
    rc = main(["skills", "--labels", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "'worker'" in err and str(bad) in err and "Traceback" not in err
    assert _files(out) == []


def test_validation_failure_blocks_with_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "labels.csv"
    bad.write_text("task,worker,label\nt1,a,1\nt1,a,0\nt2,,1\n")
    out = tmp_path / "out"
    assert main(["skills", "--labels", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "column 'worker': must not be null/NaN: 1 rows fail; e.g. row 3" in err
    assert "column 'task,worker': (task, worker) must be unique: 2 rows fail" in err
    assert _files(out) == []


def _bipartite_labels(path: Path) -> None:
    # a, b, c share tasks pairwise (a triangle: identifiable); d and e only label tasks together.
    rows = ["task,worker,label"]
    for t, (u, v) in enumerate([("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("d", "e")]):
        rows += [f"t{t},{u},1", f"t{t},{v},0"]
    path.write_text("\n".join(rows) + "\n")


def test_bipartite_component_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = tmp_path / "labels.csv"
    _bipartite_labels(labels)
    out = tmp_path / "out"
    # the rank-one method (pgd) cannot identify skills on a bipartite component: the run is refused
    assert main(["skills", "--labels", str(labels), "--out", str(out), "--method", "pgd"]) == 2
    err = capsys.readouterr().err
    assert "1 bipartite component(s)" in err
    assert "component 1: bipartite_component, 2 workers, colour classes 1/1, 4 labels: [d,e]" in err
    assert _files(out) == []
    # downgraded to a warning, the run completes and the workers table carries the status
    assert (
        main(["skills", "--labels", str(labels), "--out", str(out), "--method", "pgd", "--warn-identifiability"]) == 0
    )
    (man,) = _runs(out)
    skills = pd.read_parquet(man.parent / "skills.parquet").set_index("worker")
    assert skills.loc["d", "status"] == "bipartite_component" and skills.loc["a", "status"] == "ok"
    assert pd.isna(skills.loc["d", "skill"]) and skills.loc["d", "vote_weight"] == 0.0
    consensus = pd.read_parquet(man.parent / "consensus.parquet").set_index("task")
    assert consensus.loc[["t3", "t4"], "fallback"].all() and not consensus.loc["t0", "fallback"]


def test_bipartite_component_warns_under_the_default_method(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dawid-Skene (the default) needs no rank-one identifiability: the finding is a warning and the run completes."""
    labels = tmp_path / "labels.csv"
    _bipartite_labels(labels)
    out = tmp_path / "out"
    assert main(["skills", "--labels", str(labels), "--out", str(out)]) == 0
    assert "1 bipartite component(s)" in capsys.readouterr().err
    (man,) = _runs(out)
    skills = pd.read_parquet(man.parent / "skills.parquet").set_index("worker")
    assert skills.loc["d", "status"] == "bipartite_component"
    assert skills["skill"].notna().all()


def test_transient_faults_are_retried(tmp_path: Path, rte_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crowdflow.storage.io as cio
    import crowdflow.storage.run_store as store

    calls = {"read": 0, "write": 0}
    real_read, real_write = cio._read_csv, store.write_parquet

    def flaky_read(p: Path):  # type: ignore[no-untyped-def]
        calls["read"] += 1
        if calls["read"] == 1:
            raise OSError("transient read error (injected)")
        return real_read(p)

    def flaky_write(df, path, schema=None):  # type: ignore[no-untyped-def]
        calls["write"] += 1
        if calls["write"] == 2:
            raise OSError("transient write error (injected)")
        return real_write(df, path, schema)

    monkeypatch.setattr(cio, "_read_csv", flaky_read)
    monkeypatch.setattr(store, "write_parquet", flaky_write)
    spec = parse_spec(
        {"name": "retry", "labels": {"path": str(rte_dir / "labels.csv")}, "output": {"dir": str(tmp_path)}}
    )
    from flows.skills import skills_flow

    summary = skills_flow(spec)
    assert calls["read"] == 2 and calls["write"] == 5  # 1 failed + 1 retried read; 3 tables + 1 failed + 1 retry
    assert json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())["status"] == "completed"
    assert [p.name for p in (tmp_path / "retry").iterdir()] == [Path(summary["run_dir"]).name]


def test_persistent_export_fault_leaves_nothing(tmp_path: Path, rte_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import crowdflow.storage.run_store as cio

    spec = parse_spec(
        {"name": "fault", "labels": {"path": str(rte_dir / "labels.csv")}, "output": {"dir": str(tmp_path)}}
    )
    from flows.skills import skills_flow

    first = skills_flow(spec)
    before = sorted(p.name for p in Path(first["run_dir"]).iterdir())
    real = cio.write_parquet

    def broken(df, path, schema=None):  # type: ignore[no-untyped-def]
        if path.name.startswith("skills"):
            raise OSError("disk full (injected)")
        return real(df, path, schema)

    monkeypatch.setattr(cio, "write_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        skills_flow(spec)
    assert [p.name for p in (tmp_path / "fault").iterdir()] == [Path(first["run_dir"]).name]
    assert sorted(p.name for p in Path(first["run_dir"]).iterdir()) == before


def test_cache_follows_what_the_fit_receives(tmp_path: Path) -> None:
    """The issue's case: a run, then the same file with its task/worker mapping fixed. Before, the second run
    was answered from the cache (the key was the file's hash plus the options) and exported the first run's
    consensus while its manifest recorded the new mapping."""
    from flows.skills import skills_flow

    rows = [(f"t{t}", f"w{w}", "a" if (t + w) % 3 else "b") for t in range(12) for w in range(4)]
    pd.DataFrame(rows, columns=["a", "b", "label"]).to_csv(tmp_path / "labels.csv", index=False)

    def run(columns: dict[str, str], **cache: object) -> dict:
        spec = parse_spec(
            {
                "name": "cache",
                "labels": {"path": "labels.csv", "columns": columns},
                "skills": {"method": "mv", "tie_break": "smallest"},
                "output": {"dir": "out"},
                "cache": cache,
            },
            base_dir=tmp_path,
        )
        summary = skills_flow(spec)
        manifest = json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())
        manifest["consensus"] = pd.read_parquet(Path(summary["run_dir"]) / "consensus.parquet")
        return manifest

    swapped = run({"task": "b", "worker": "a"})
    fixed = run({"task": "a", "worker": "b"})
    assert not fixed["cache"]["hit"] and fixed["cache"]["key"] != swapped["cache"]["key"]
    assert set(fixed["consensus"]["task"]) == {f"t{t}" for t in range(12)}  # tasks named like tasks, not workers
    again = run({"task": "a", "worker": "b"})
    assert again["cache"]["hit"] and again["cache"]["key"] == fixed["cache"]["key"]
    assert again["cache"]["computed_in_flow_run"] == fixed["flow_run_id"]
    pd.testing.assert_frame_equal(again["consensus"], fixed["consensus"])
    off = run({"task": "a", "worker": "b"}, enabled=False)
    assert not off["cache"]["hit"] and off["cache"]["computed_in_flow_run"] == off["flow_run_id"]
