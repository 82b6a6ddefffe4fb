"""deployments/prefect.yaml, the example specs and their sample data; the typed deployment parameters; the
pull step that makes deployments run on any worker, the event trigger that chains the closed loop, the freshness
guard on the skills run it reads, and the one install extra that holds what every deployment needs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml

from crowdflow.contracts.errors import InputError
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
            where = ROOT / spec.path_of(src)
            assert where.is_file() or any(where.glob("*/*.parquet")), src.path  # a file, or a partitioned folder
        if spec.runner.kind == "inline":
            jobs.add(spec.job)
            # each runs on a clock or, the closed loop, on the completion of the run it reads
            assert dep.get("schedules", [{}])[0].get("cron") or dep.get("triggers"), dep["name"]
    assert jobs == JOBS


PULL_STEP = {"flows.operator.enter_project": {"directory": "{{ prefect.variables.crowdflow_project_dir }}"}}


def test_deployments_pull_the_project_folder_from_a_variable() -> None:
    """No deployment records the deploying machine's folder: one pull step, resolved by the worker at run time.

    Without a ``pull`` section ``prefect deploy`` stores ``set_working_directory: <the absolute folder it ran in>``,
    so only that machine (and folder) could run the deployments (issue #25 item 1).
    """
    config = yaml.safe_load((DEPLOY / "prefect.yaml").read_text())
    assert config["pull"] == [PULL_STEP]
    for dep in config["deployments"]:
        assert "pull" not in dep, dep["name"]  # the top-level step applies to every deployment
        spec = dep["parameters"].get("spec")
        if spec is not None:  # relative to the project folder on the worker, never an absolute path of this machine
            assert not Path(spec["base_dir"]).is_absolute() and not Path(spec["output"]["dir"]).is_absolute()
    text = (DEPLOY / "prefect.yaml").read_text()
    assert str(ROOT) not in text and not re.search(r"^\s*directory: /", text, re.M)


def test_paths_are_resolved_without_dot_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment's relative paths resolve against the run's working directory (the project folder) into
    absolute, normalised paths: logs and manifests name /srv/crowdflow/crowdflow/data/..., never ../../."""
    monkeypatch.chdir(ROOT)
    dep = next(d for d in _deployments() if d["name"] == "next-batch")
    spec = parse_spec(dep["parameters"]["spec"], base_dir=None)
    paths = [spec.path_of(src) for src in spec.inputs().values()] + [spec.output_dir(), Path(spec.skills_run_path())]
    for p in paths:
        assert p.is_absolute() and ".." not in p.parts, p
    assert spec.path_of(spec.inputs()["workers"]) == ROOT / "crowdflow" / "data" / "samples" / "workers.csv"
    assert spec.output_dir() == ROOT / "crowdflow-out"


def test_next_batch_is_chained_by_the_skills_runs_completion() -> None:
    """The closed loop runs on Prefect's event, not 30 minutes after the skills run (issue #25 item 4)."""
    deps = {d["name"]: d for d in _deployments()}
    loop = deps["next-batch"]
    assert not loop.get("schedules")  # no clock
    (trigger,) = loop["triggers"]
    assert trigger["enabled"] and trigger.get("type", "event") == "event"
    assert trigger["expect"] == ["prefect.flow-run.Completed"]  # a failed or crashed skills run starts nothing
    assert trigger["match"] == {"prefect.resource.id": "prefect.flow-run.*"}
    assert trigger["match_related"] == {"prefect.resource.role": "deployment", "prefect.resource.name": "rte-skills"}
    skills = parse_spec(deps["rte-skills"]["parameters"]["spec"], base_dir=None)
    spec = parse_spec(loop["parameters"]["spec"], base_dir=None)
    # it reads the output folder of the deployment whose completion triggers it, and refuses a stale run
    assert Path(spec.skills_run_path()) == skills.output_dir() / skills.name
    assert spec.max_skills_run_age_hours is not None and spec.max_skills_run_age_hours <= 24
    # the Prefect model of deployment triggers accepts it as written
    from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger

    model = DeploymentEventTrigger.model_validate(trigger)
    assert model.expect == {"prefect.flow-run.Completed"}


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_the_deploy_extra_holds_what_every_deployment_needs() -> None:
    """``pip install '.[deploy]'`` is the one install for workers: report + dask + warehouse, and it covers the needs of
    every shipped deployment (before, ``deploy --all`` shipped rte-skills-dask to workers installed with ``[report]``)."""
    from flows.pipeline import EXTRA_MODULES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    deploy = _requirement_names(extras["deploy"])
    for name in ("report", "dask", "warehouse"):
        assert _requirement_names(extras[name]) <= deploy, name
    # crowdkit (skills.method crowdkit:<Name>) is an extra of its own, kept out of deploy (~200 MB; no shipped spec uses it)
    assert set(EXTRA_MODULES) == {"report", "dask", "warehouse", "crowdkit"}
    assert "crowdkit" in extras and "crowd-kit" not in deploy
    needed: set[str] = set()
    for dep in _deployments():
        params = dep["parameters"]
        spec = parse_spec(params["spec"], base_dir=None) if "spec" in params else load_spec(ROOT / params["spec_path"])
        needed |= set(spec.extras())
    for path in sorted((DEPLOY / "specs").glob("*.yaml")):  # what the spec-file deployment can be pointed at
        needed |= set(load_spec(path).extras())
    assert needed == {"report", "dask", "warehouse"}  # rte-skills-dask and rte-skills-warehouse are shipped specs
    assert needed <= set(extras) and all(_requirement_names(extras[n]) <= deploy for n in needed)


def _skills_run(out: Path, finished: datetime) -> Path:
    run = out / "rte-skills" / "20260101T000000Z-aaaaaaaa"
    run.mkdir(parents=True)
    for name in ("skills", "consensus"):
        pd.DataFrame({"x": [1]}).to_parquet(run / f"{name}.parquet")
    manifest = {
        "run_id": run.name,
        "job": "skills",
        "status": "completed",
        "started_at": (finished - timedelta(minutes=5)).isoformat(timespec="seconds"),
        "finished_at": finished.isoformat(timespec="seconds"),
        "outputs": {"skills": {"path": "skills.parquet"}, "consensus": {"path": "consensus.parquet"}},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def test_a_stale_skills_run_is_refused_naming_the_run_and_its_age(tmp_path: Path) -> None:
    """max_skills_run_age_hours: an old skills run (the skills deployment failed or is late) is refused, not used."""
    from crowdflow.storage.run_store import read_skills_run

    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    run = _skills_run(tmp_path, now - timedelta(hours=30))
    assert read_skills_run(tmp_path / "rte-skills", now=now)["age_hours"] == pytest.approx(30.0)  # no limit: used
    assert read_skills_run(tmp_path / "rte-skills", 36, now=now)["run_id"] == run.name
    with pytest.raises(InputError) as exc:
        read_skills_run(tmp_path / "rte-skills", 12, now=now)
    msg = str(exc.value)
    assert run.name in msg and "30.0 h old" in msg and "max_skills_run_age_hours: 12" in msg and str(run) in msg
    # the run's start time serves for runs written before finished_at was recorded
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["finished_at"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert read_skills_run(run, now=now)["age_hours"] == pytest.approx(30.0 + 5 / 60)


def test_the_freshness_guard_is_the_cli_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``crowdflow next-batch --dry-run`` (the run's own checks): exit 2 with the run and its age."""
    from flows.cli import main

    _skills_run(tmp_path / "out", datetime.now(UTC) - timedelta(hours=3))
    samples = ROOT / "crowdflow" / "data" / "samples"
    argv = ["next-batch", "--skills-run", str(tmp_path / "out" / "rte-skills"), "--open-tasks"]
    argv += [str(samples / "open_tasks.csv"), "--workers", str(samples / "workers.csv"), "--out", str(tmp_path / "o")]
    assert main([*argv, "--max-skills-run-age-hours", "2", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "20260101T000000Z-aaaaaaaa is 3.0 h old" in err and "max_skills_run_age_hours: 2" in err
    assert main([*argv, "--max-skills-run-age-hours", "abc"]) == 2  # not a number: the flag's own error
    assert (
        parse_spec(
            {"name": "n", "job": "next_batch", "skills_run": "x", "open_tasks": {"path": "a"}, "workers": {"path": "b"}}
        ).max_skills_run_age_hours
        is None
    )


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
        # the job: a required one-item choice (no "const", no "(Optional)") under a short button title
        assert d["type"] == "object" and d["properties"]["job"]["enum"] == [job] and d["title"] == job
        assert "const" not in d["properties"]["job"] and "default" not in d["properties"]["job"]
        assert d["required"][0] == "job"
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
    # a source: one of four kinds, each with its own fields only and its required ones marked
    # (inline in each job's inputs: the UI draws a property's own anyOf as buttons, not one behind a $ref)
    source = schema["definitions"]["SkillsPipeline"]["properties"]["labels"]
    assert "properties" not in source and "$ref" not in source
    for model in JOB_MODELS.values():
        for key in JOB_INPUTS_ALL:
            if key in schema["definitions"][model.__name__]["properties"]:
                assert schema["definitions"][model.__name__]["properties"][key]["anyOf"] == source["anyOf"]
    kinds = {b["title"]: b for b in source["anyOf"]}
    assert list(kinds) == ["Folder", "File", "URL", "SQL query"]
    assert set(kinds["File"]["properties"]) == {"path", "format", "columns"} and kinds["File"]["required"] == ["path"]
    assert set(kinds["Folder"]["properties"]) == {"folder", "columns"} and kinds["Folder"]["required"] == ["folder"]
    assert set(kinds["URL"]["properties"]) == {"url", "storage_options", "columns"} and kinds["URL"]["required"] == [
        "url"
    ]
    assert set(kinds["SQL query"]["properties"]) == {
        "sql",
        "params",
        "connection",
        "password_env",
        "password_secret",
        "columns",
    } and kinds["SQL query"]["required"] == ["sql", "connection"]
    for branch in source["anyOf"]:
        assert all(prop.get("description") for prop in branch["properties"].values())
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
    days = sorted(str(p.relative_to(shipped)) for p in shipped.glob("daily_labels/*/*.parquet"))
    assert days == sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("daily_labels/*/*.parquet"))
    assert len(days) == 3
    for name in days:
        assert (tmp_path / name).read_bytes() == (shipped / name).read_bytes(), name


def test_the_schedule_runs_skills_before_the_loop() -> None:
    """The scheduled pipelines run in schedule order: the skills run the next batch reads comes first. Every shipped
    spec (each deployment's) is run end to end, once, by tests/test_shipped.py (outputs read back, the loop's
    assignment counted there)."""
    order = [d["name"] for d in _deployments() if "spec" in d["parameters"] and "dask" not in d["name"]]
    assert order.index("rte-skills") < order.index("next-batch")
    loop = load_spec(DEPLOY / "specs" / "next-batch.yaml")
    assert Path(loop.skills_run).name == load_spec(DEPLOY / "specs" / "rte-skills.yaml").name
