"""deployments/prefect.yaml, the example specs and their sample data; the typed deployment parameters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crowdflow.spec import JOB_INPUTS, JOB_INPUTS_ALL, JOB_MODELS, JOB_OPTIONS, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deployments"
JOBS = {"skills", "ranking", "personal_rankings", "personal_models", "assignment", "next_batch"}


def _deployments() -> list[dict]:
    return yaml.safe_load((DEPLOY / "prefect.yaml").read_text())["deployments"]


def test_one_scheduled_deployment_per_job_and_specs_in_sync() -> None:
    jobs = set()
    for dep in _deployments():
        module, func = dep["entrypoint"].split(":")
        assert (ROOT / module).is_file()
        if func == "run_spec_file":
            assert load_spec(ROOT / dep["parameters"]["spec_path"]).name
            continue
        assert func == "run_pipeline"
        params = dep["parameters"]["spec"]
        assert params["base_dir"] == "deployments/specs"
        # the inline spec is the spec file verbatim (+ base_dir): same meaning, one source of truth
        on_disk = yaml.safe_load((DEPLOY / "specs" / f"{dep['name']}.yaml").read_text())
        assert {k: v for k, v in params.items() if k != "base_dir"} == on_disk
        spec = parse_spec(params, origin=dep["name"], base_dir=None)
        for src in spec.inputs().values():  # paths resolve from the project root, as on a worker
            assert (ROOT / spec.path_of(src)).is_file(), src.path
        if spec.runner.kind == "inline":
            jobs.add(spec.job)
            assert dep["schedules"][0]["cron"]
    assert jobs == JOBS


def test_run_pipeline_parameters_are_an_object_schema() -> None:
    from prefect.utilities.callables import parameter_schema

    from flows.deploy import run_pipeline, run_spec_file

    schema = parameter_schema(run_pipeline.fn).model_dump()
    assert schema["required"] == ["spec"]
    # one form per job: an anyOf over the jobs' models, each holding only its own inputs and options
    refs = [b["$ref"].split("/")[-1] for b in schema["properties"]["spec"]["anyOf"]]
    assert refs == [m.__name__ for m in JOB_MODELS.values()]
    for job, model in JOB_MODELS.items():
        d = schema["definitions"][model.__name__]
        assert d["type"] == "object" and d["properties"]["job"]["const"] == job and d["title"].startswith(job)
        required, optional = JOB_INPUTS[job]
        assert set(required) <= set(d["required"]) and "name" in d["required"]
        inputs = {k for k in d["properties"] if k in JOB_INPUTS_ALL}
        assert inputs == set(required) | set(optional)  # no other job's tables
        assert JOB_OPTIONS[job] in d["properties"]
        assert not (set(JOB_OPTIONS.values()) - {JOB_OPTIONS[job]}) & set(d["properties"])  # no other job's options
        assert "Attributes" not in d.get("description", "") and "\n\n" not in d.get("description", "")
        for name, prop in d["properties"].items():  # a plain sentence per field; no "None" type to read past
            assert prop.get("description"), f"{model.__name__}.{name}"
            assert {"type": "null"} not in prop.get("anyOf", []), f"{model.__name__}.{name}"
    assert schema["definitions"]["RunnerSpec"]["properties"]["kind"]["enum"] == ["inline", "dask"]
    assert {"pgd", "onecoin_ds", "ds", "mv"} <= set(
        schema["definitions"]["SkillsOptions"]["properties"]["method"]["enum"]
    )
    by_path = parameter_schema(run_spec_file.fn).model_dump()
    assert by_path["properties"]["spec_path"]["type"] == "string" and by_path["required"] == ["spec_path"]


def test_sample_data_regenerates_identically(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(DEPLOY / "make_sample_data.py"), "--out", str(tmp_path)], check=True, capture_output=True
    )
    shipped = ROOT / "crowdflow" / "data" / "samples"
    names = sorted(p.name for p in shipped.glob("*.csv"))
    assert names == sorted(p.name for p in tmp_path.glob("*.csv")) and len(names) == 7
    for name in names:
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_every_example_spec_runs(tmp_path: Path) -> None:
    """The scheduled pipelines, through the deployments' entry flow, in schedule order (skills before the loop)."""
    from flows.deploy import run_pipeline

    out = tmp_path / "out"
    order = [d["name"] for d in _deployments() if "spec" in d["parameters"] and "dask" not in d["name"]]
    assert order.index("rte-skills") < order.index("next-batch")
    for name in order:
        spec = load_spec(DEPLOY / "specs" / f"{name}.yaml")
        update: dict = {"output": spec.output.model_copy(update={"dir": str(out)})}
        if spec.job == "next_batch":
            update["skills_run"] = str(out / "rte-skills")
        summary = run_pipeline(spec.model_copy(update=update))
        manifest = json.loads((Path(summary["run_dir"]) / "manifest.json").read_text())
        assert manifest["status"] == "completed" and manifest["job"] == spec.job
        tables = list(Path(summary["run_dir"]).glob("*.parquet"))
        assert tables and all(len(pd.read_parquet(t).columns) for t in tables)
    loop = json.loads(next((out / "sample-next-batch").rglob("manifest.json")).read_text())
    assert loop["metrics"]["n_assigned"] == 40 and loop["metrics"]["n_workers_without_skill"] == 1
