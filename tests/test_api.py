"""The Python front door (#23 part 1): the job functions return the tables a run writes, read_run reads them back.

A run of each job on a bundled sample (through the pipeline, under the Prefect test harness) and the front-door
call on the same DataFrame give equal tables (columns, order, dtypes, values); ``read_run`` reads both layouts and
refuses an incomplete run; the front doors raise the library's errors and apply the pipeline's check policies.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
import yaml
from pydantic import ValidationError

import crowdflow as cf
from crowdflow.checks import check_modes
from crowdflow.contracts.errors import GraphCheckFailed, InputError, ValidationFailed
from crowdflow.contracts.tables import OUTPUTS
from crowdflow.spec import ChecksSpec, parse_spec

DATA = Path(cf.__file__).parent / "data"
SAMPLES = DATA / "samples"

# job → (spec inputs: table → sample file, options, the front-door call on the same DataFrames)
JOBS: dict[str, tuple[dict[str, str], dict[str, Any]]] = {
    "skills": ({"labels": "snow_rte/labels.csv", "truth": "snow_rte/truth.csv"}, {"method": "ds"}),
    "ranking": ({"comparisons": "samples/comparisons.csv"}, {}),
    "personal_rankings": ({"comparisons": "samples/personal_comparisons.csv"}, {}),
    "personal_models": ({"agents": "samples/agents.csv", "edges": "samples/edges.csv"}, {}),
    "assignment": ({"candidates": "samples/candidates.csv"}, {"budget": 20}),
}


def _door(job: str, frames: dict[str, pd.DataFrame], options: dict[str, Any]) -> Any:
    if job == "skills":
        return cf.skills(frames["labels"], frames["truth"], **options)
    if job == "ranking":
        return cf.rank(frames["comparisons"], **options)
    if job == "personal_rankings":
        return cf.personal_rankings(frames["comparisons"], **options)
    if job == "personal_models":
        return cf.personal_models(frames["agents"], frames["edges"], **options)
    return cf.assign(frames["candidates"], **options)


def _run(tmp_path: Path, job: str, layout: str = "flat", name: str | None = None) -> Path:
    """Run ``job`` on its sample through the pipeline (``crowdflow run spec.yaml``); the output folder."""
    from flows.cli import main

    inputs, options = JOBS[job]
    name = name or f"api-{job}".replace("_", "-")
    spec: dict[str, Any] = {
        "name": name,
        "job": job,
        **{kind: {"path": str(DATA / rel)} for kind, rel in inputs.items()},
        "output": {"dir": str(tmp_path / "out"), "layout": layout, "report": False},
        "cache": {"enabled": False},
    }
    if options:
        spec[job] = options
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path)]) == 0
    return tmp_path / "out"


def _volatile(table: pd.DataFrame) -> list[str]:
    """Columns that hold wall-clock times (differ between any two fits)."""
    return [c for c in table.columns if c in ("time_s", "seconds", "elapsed_s")]


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("job", list(JOBS))
def test_front_door_tables_equal_the_runs(tmp_path: Path, job: str) -> None:
    inputs, options = JOBS[job]
    out = _run(tmp_path, job)
    run = cf.latest_run(out, f"api-{job}".replace("_", "-"))
    assert run.job == job and run.manifest["status"] == "completed"
    frames = {kind: pd.read_csv(DATA / rel, dtype=str, keep_default_na=False) for kind, rel in inputs.items()}
    fit = _door(job, frames, options)
    assert set(fit.tables) == set(run.tables), job
    for name, table in fit.tables.items():
        written = run[name]
        drop = _volatile(table)
        pd.testing.assert_frame_equal(
            table.drop(columns=drop), written.drop(columns=drop), check_exact=False, rtol=1e-9, obj=f"{job}.{name}"
        )
        schema = OUTPUTS.get(job, {}).get(name)
        if schema is not None:  # the run's columns, in order, with the contract's Arrow types
            assert pa.Schema.from_pandas(table, preserve_index=False).names == schema.names, (job, name)


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_read_run_hive_layout_and_refusals(tmp_path: Path) -> None:
    out = _run(tmp_path, "ranking", layout="hive", name="rank-hive")
    hive = cf.latest_run(out, "rank-hive")
    assert hive.manifest["layout"] == "hive" and "run_id" not in hive["ranking"].columns
    flat = cf.latest_run(_run(tmp_path / "flat", "ranking", name="rank-flat"), "rank-flat")
    for name in flat.tables:
        pd.testing.assert_frame_equal(hive[name], flat[name], obj=name)
    with pytest.raises(KeyError, match="has no table 'nope'"):
        hive["nope"]

    run_dir = flat.path
    with pytest.raises(InputError, match=r"pipeline folder: use crowdflow\.latest_run"):
        cf.read_run(run_dir.parent)
    with pytest.raises(InputError, match="no run folder"):
        cf.read_run(tmp_path / "missing")
    staging = run_dir.parent / f".{run_dir.name}.partial"
    shutil.copytree(run_dir, staging)
    with pytest.raises(InputError, match="staging folder"):
        cf.read_run(staging)
    broken = run_dir.parent / "broken"
    shutil.copytree(run_dir, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    (broken / "ranking.parquet").unlink()
    with pytest.raises(InputError, match="'ranking' table that is not on disk"):
        cf.read_run(broken)
    manifest["status"] = "running"
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="not completed"):
        cf.read_run(broken)
    with pytest.raises(InputError, match="invalid pipeline name"):
        cf.latest_run(tmp_path / "flat" / "out", "../x")


def _triangle(bipartite: bool) -> pd.DataFrame:
    """Three workers; with ``bipartite`` a worker graph of two sides (a-b, a-c share tasks, b-c never do)."""
    rows = [("t1", "a", "x"), ("t1", "b", "x"), ("t2", "a", "y"), ("t2", "c", "y"), ("t3", "a", "x"), ("t3", "c", "y")]
    if not bipartite:
        rows += [("t4", "b", "y"), ("t4", "c", "y")]
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


def test_skills_check_policy_is_the_pipelines() -> None:
    labels = _triangle(bipartite=True)
    with pytest.raises(GraphCheckFailed):
        cf.skills(labels, method="pgd")  # rank-one skills are not identifiable: blocks, as in the pipeline
    fit = cf.skills(labels, method="pgd", checks={"identifiability": "warn"})
    assert fit.checks.report is not None and len(fit.consensus) == 3
    assert len(cf.skills(labels).consensus) == 3  # the default (ds) only warns, as SkillsPipeline.check_modes


def test_check_modes_defaults_match_the_spec() -> None:
    for job in ("skills", "ranking", "personal_rankings", "personal_models", "assignment"):
        spec = ChecksSpec()
        assert check_modes(job) == {**spec.modes(job), "validation": spec.validation}, job
    with pytest.raises(ValueError, match="unknown check"):
        check_modes("skills", {"nope": "warn"})
    with pytest.raises(ValueError, match="'block' or 'warn'"):
        check_modes("skills", "maybe")  # type: ignore[arg-type]
    skills_spec = parse_spec({"name": "x", "labels": {"path": "l.csv"}, "skills": {"method": "pgd"}}, base_dir=".")
    assert skills_spec.check_modes()["identifiability"] == "block"


def test_front_door_errors_are_the_librarys() -> None:
    labels = _triangle(bipartite=False)
    with pytest.raises(ValidationError):
        cf.skills(labels, method="nope")
    with pytest.raises(ValidationError):
        cf.skills(labels, not_an_option=1)
    with pytest.raises(InputError, match="worker"):
        cf.skills(labels.drop(columns="worker"))
    with pytest.raises(InputError, match="DataFrame"):
        cf.skills(labels.to_dict())  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed, match="must be unique"):
        cf.skills(pd.concat([labels, labels.iloc[:1]]))  # a repeated (task, worker) pair under duplicates: error
    kept = cf.skills(pd.concat([labels, labels.iloc[:1]]), duplicates="keep_first")
    assert kept.metrics["n_duplicates_dropped"] == 1
    with pytest.raises(InputError):
        cf.rank(pd.DataFrame({"worker": ["u"], "left": ["a"], "right": ["b"], "label": ["c"]}))


def test_front_door_reads_crowd_kit_and_mapped_columns() -> None:
    labels = _triangle(bipartite=False)
    mapped = labels.rename(columns={"task": "item", "worker": "annotator_id"})
    a = cf.skills(labels, method="mv", tie_break="smallest")
    b = cf.skills(mapped, method="mv", tie_break="smallest", columns={"task": "item", "worker": "annotator_id"})
    pd.testing.assert_frame_equal(a.consensus, b.consensus)
    assert list(mapped.columns) == ["item", "annotator_id", "label"]  # the caller's frame is not modified
    # Crowd-Kit's pairwise layout: worker, left, right, label (the winner)
    votes = pd.DataFrame(
        {"worker": ["u1", "u2", "u3"], "left": ["a", "b", "a"], "right": ["b", "c", "c"], "label": ["a", "b", "a"]}
    )
    assert cf.rank(votes, outliers="none").ranking["item"].tolist() == ["a", "b", "c"]


def test_job_packages_stay_packages() -> None:
    from crowdflow.skills import fit_skills

    assert cf.skills.fit_skills is fit_skills and callable(cf.skills) and callable(cf.personal_models)
    assert pickle.loads(pickle.dumps(fit_skills)) is fit_skills
    import inspect

    assert "truth" in inspect.signature(cf.skills).parameters


def test_import_crowdflow_stays_light() -> None:
    code = (
        "import sys, crowdflow; print(sorted(m for m in ('pandas', 'numpy', 'pydantic', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


BAD_TABLES: dict[str, tuple[str, pd.DataFrame]] = {
    "labels_nulls_na_dups": (
        "labels",
        pd.DataFrame(
            {
                "task": ["t1", "t1", "t2", "NULL", "t3", "t3"],
                "worker": ["a", "a", None, "b", "#N/A", "c"],
                "label": ["x", "y", "x", "y", "x", None],
            }
        ),
    ),
    "labels_one_class": ("labels", pd.DataFrame({"task": ["t1", "t2"], "worker": ["a", "b"], "label": ["x", "x"]})),
    "comparisons_self_and_inf": (
        "comparisons",
        pd.DataFrame(
            {
                "annotator": ["u1", "u2", "u3", "u4"],
                "item_a": ["a", "b", "c", "a"],
                "item_b": ["a", "c", "d", "b"],
                "outcome": [1.0, float("inf"), -1.0, 1e300],
            }
        ),
    ),
    "edges_bad_weight": (
        "edges",
        pd.DataFrame({"source": ["a", "b", "c"], "target": ["b", "b", "a"], "weight": [0.0, 1.0, -2.0]}),
    ),
}


@pytest.mark.parametrize("case", list(BAD_TABLES))
def test_rules_fail_as_the_great_expectations_suite(case: str) -> None:
    """The front door's pandas rules (crowdflow.contracts.rules) fail the same columns with the same counts as the GX suite."""
    from crowdflow.contracts.rules import check_rules
    from crowdflow.contracts.tables import INPUTS
    from crowdflow.storage.io import read_frame
    from schemas.validation import validate_frame

    kind, raw = BAD_TABLES[case]
    df = read_frame(raw, INPUTS[kind]).df
    ours = check_rules(df, INPUTS[kind], case)
    theirs = validate_frame(df, INPUTS[kind], case)
    assert ours.n_rules == theirs.n_expectations
    assert sorted((f.column, f.count) for f in ours.failures) == sorted(
        (f.column, f.unexpected_count) for f in theirs.failures
    )
    assert not ours.success
