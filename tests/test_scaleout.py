"""Scale-out (runner: dask) gives the in-process results; long fits report progress (library, flow, CLI)."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from crowdflow.labels import encode_labels
from crowdflow.personal_models import build_problem, centralized, fit_personal_models
from crowdflow.progress import IterationProgress
from crowdflow.skills import (
    fit_skills,
    label_moments,
    moments_from_partitions,
    partition_pair_counts,
    write_label_partitions,
)
from crowdflow.spec import parse_spec
from crowdflow.synth.personal_models import field_estimation_instance


@pytest.fixture(scope="module")
def rte_lm(rte_dir: Path):  # type: ignore[no-untyped-def]
    return encode_labels(pd.read_csv(rte_dir / "labels.csv", dtype=str))


def _same_csr(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)  # exact: integer sums, same float operations after


@pytest.mark.parametrize("n_parts", [1, 3, 8])
def test_partitioned_moments_equal_in_memory(rte_lm, tmp_path: Path, n_parts: int) -> None:  # type: ignore[no-untyped-def]
    paths = write_label_partitions(rte_lm, tmp_path, n_parts)
    assert len(paths) == n_parts
    tasks = [set(pd.read_parquet(p)["task"]) for p in paths]
    assert sum(map(len, tasks)) == rte_lm.n_tasks  # every task in exactly one partition
    parts = [partition_pair_counts(p, rte_lm.n_workers, rte_lm.n_classes) for p in paths]
    got = moments_from_partitions(parts, rte_lm.n_classes)
    want = label_moments(rte_lm)
    for name in ("co_labels", "agreements", "c_hat"):
        _same_csr(getattr(got, name), getattr(want, name))


def test_fit_skills_with_given_moments_is_identical(rte_lm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    paths = write_label_partitions(rte_lm, tmp_path, 4)
    moments = moments_from_partitions(
        [partition_pair_counts(p, rte_lm.n_workers, rte_lm.n_classes) for p in paths], rte_lm.n_classes
    )
    a = fit_skills(rte_lm, method="pgd", solver="scaled", seed=0)
    b = fit_skills(rte_lm, method="pgd", solver="scaled", seed=0, moments=moments)
    pd.testing.assert_frame_equal(a.skills, b.skills)
    pd.testing.assert_frame_equal(a.consensus, b.consensus)
    # the given moments are the ones used: counts from half the partitions give other skills
    half = moments_from_partitions(
        [partition_pair_counts(p, rte_lm.n_workers, rte_lm.n_classes) for p in paths[:2]], rte_lm.n_classes
    )
    c = fit_skills(rte_lm, method="pgd", solver="scaled", seed=0, moments=half)
    assert np.abs(c.skills["skill"].to_numpy() - a.skills["skill"].to_numpy()).max() > 0.05
    other = pd.DataFrame({"task": ["t1", "t1", "t2", "t2"], "worker": ["a", "b", "a", "b"], "label": list("xyxx")})
    with pytest.raises(ValueError, match="moments are for"):
        fit_skills(rte_lm, method="pgd", moments=label_moments(encode_labels(other)))


def test_iteration_progress_is_monotone_throttled_and_ends_at_one() -> None:
    seen: list[float] = []
    tr = IterationProgress(seen.append, max_iter=10_000, target=1e-8)
    for k, r in enumerate(np.logspace(0, -9, 5000), start=1):
        tr.update(k, float(r))
    tr.done()
    assert seen[-1] == 1.0 and all(b > a for a, b in itertools.pairwise(seen))
    assert 10 < len(seen) <= 101  # one call per >= 1 % step, not one per iteration
    assert max(seen[:-1]) <= 0.99  # only done() reports completion
    IterationProgress(None, 10).update(3, 0.1)  # no callback: no-op


def test_solvers_report_progress(rte_lm) -> None:  # type: ignore[no-untyped-def]
    seen: list[float] = []
    fit_skills(rte_lm, method="pgd", solver="gd", max_iter=300, tol=1e-7, progress=seen.append)
    assert len(seen) > 3 and seen[-1] == 1.0 and seen == sorted(seen)
    inst = field_estimation_instance(3, n=15)
    seen_djam: list[float] = []
    res = fit_personal_models(inst.agents, inst.edges, reg=0.1, method="djam", progress=seen_djam.append)
    assert res.converged and seen_djam[-1] == 1.0 and seen_djam == sorted(seen_djam) and len(seen_djam) > 2


@pytest.mark.parametrize("interval", [0.0, 3600.0])
def test_fit_progress_logs_the_first_line_one_per_interval_and_the_last(interval: float) -> None:
    """The callback of ``tasks.progress.fit_progress`` (outside a run: no artifact, the module's logger): listeners
    see every fraction and 1.0 at the end; pass lines logged the first, then one per ``line_interval`` seconds, and
    the last one when the block ends (also on an error)."""
    import logging

    from tasks.progress import add_listener, fit_progress, remove_listener

    got: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: got.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tasks.progress")
    logger.addHandler(handler)
    old, logger.level = logger.level, logging.INFO
    seen: list[float] = []
    add_listener(_record := lambda what, fraction: seen.append(fraction))
    try:

        def failing_fit() -> None:
            with fit_progress("k", "d", line_interval=interval) as progress:
                for k in range(1, 11):
                    progress(k / 20)
                    progress.note(f"pass {k}")
                raise RuntimeError("the fit failed")

        with pytest.raises(RuntimeError):
            failing_fit()
        assert got == ([f"pass {k}" for k in range(1, 11)] if interval == 0 else ["pass 1", "pass 10"])
        assert seen == [k / 20 for k in range(1, 11)]  # no 1.0: the block failed
        with fit_progress("k", "d", line_interval=interval) as progress:
            progress(0.5)
        assert seen[-2:] == [0.5, 1.0]
    finally:
        remove_listener(_record)
        logger.removeHandler(handler)
        logger.level = old


def _outputs(run_dir: str) -> dict[str, pd.DataFrame]:
    return {p.stem: pd.read_parquet(p) for p in sorted(Path(run_dir).glob("*.parquet"))}


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_dask_runner_gives_identical_outputs(rte_dir: Path, tmp_path: Path, dask_spy: list[int]) -> None:
    """RTE skills (PGD) and blocked DJAM, each run in process and on a Dask LocalCluster: equal outputs."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey

    from flows.deploy import run_pipeline

    scratch = tmp_path / "scratch" / "not-yet"  # created by the run (before: "unexpected error")
    dask = {"kind": "dask", "n_workers": 2, "processes": False, "partitions": 4, "scratch_dir": str(scratch)}
    base = {
        "name": "rte",
        "labels": {"path": str(rte_dir / "labels.csv")},
        "truth": {"path": str(rte_dir / "truth.csv")},
        "skills": {"method": "pgd", "seed": 0},
    }
    inline = run_pipeline(parse_spec({**base, "output": {"dir": str(tmp_path / "inline")}}))
    assert dask_spy == []  # the in-process run never touches Dask
    on_dask = run_pipeline(parse_spec({**base, "runner": dask, "output": {"dir": str(tmp_path / "dask")}}))
    assert dask_spy == [4]  # the moments: one Dask task per partition
    assert scratch.is_dir()
    a, b = _outputs(inline["run_dir"]), _outputs(on_dask["run_dir"])
    assert set(a) == {"consensus", "skills", "components", "gold_workers", "gold_confusion"} == set(b)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)
    man = json.loads((Path(on_dask["run_dir"]) / "manifest.json").read_text())
    assert man["fit"]["moments_partitions"] == 4 and man["spec"]["runner"]["kind"] == "dask"
    assert "moments_partitions" not in json.loads((Path(inline["run_dir"]) / "manifest.json").read_text())["fit"]

    with get_client(sync_client=True) as client:  # the Dask run's own progress artifact
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["rte-fit-skills-progress"]),  # <pipeline>-fit-skills-progress
                flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(man["flow_run_id"])]),
            )
        )
    assert arts and all(art.type == "progress" for art in arts) and max(float(art.data) for art in arts) == 100.0

    inst = field_estimation_instance(5, n=30)
    inst.agents.to_csv(tmp_path / "agents.csv", index=False)
    inst.edges.to_csv(tmp_path / "edges.csv", index=False)
    pm = {
        "name": "pm",
        "job": "personal_models",
        "agents": {"path": str(tmp_path / "agents.csv")},
        "edges": {"path": str(tmp_path / "edges.csv")},
        "personal_models": {"method": "djam_blocked", "n_blocks": 3, "reg": 0.1, "seed": 4},
    }
    pa = run_pipeline(parse_spec({**pm, "output": {"dir": str(tmp_path / "pm-inline")}}))
    assert dask_spy == [4]
    pb = run_pipeline(parse_spec({**pm, "runner": dask, "output": {"dir": str(tmp_path / "pm-dask")}}))
    assert len(dask_spy) > 1 and set(dask_spy[1:]) == {3}  # the DJAM block rounds, 3 blocks each
    pd.testing.assert_frame_equal(
        _outputs(pa["run_dir"])["personal_models"], _outputs(pb["run_dir"])["personal_models"], check_exact=True
    )


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("method", ["pgd", "auto"])
def test_cli_draws_a_progress_bar_on_a_terminal(
    rte_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """The bar rises (never back) to one 100 %: PGD's iterations, and ``auto``'s candidate fits on every fold and its
    refit as one job (the in-memory Dawid–Skene EM reports, issue #36)."""
    from flows.cli import main

    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    args = [
        "skills",
        "--labels",
        str(rte_dir / "labels.csv"),
        "--seed",
        "11",
        "--method",
        method,
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 0
    text = err.getvalue()
    assert f"\rskills fit ({method}) [" in text and text.count("100%") == 1 and "] 100%\n" in text
    shown = [int(p) for p in re.findall(rf"\rskills fit \({method}\) \[[#-]+\] +(\d+)%", text)]
    assert len(shown) > 5 and shown == sorted(set(shown)) and shown[-1] == 100


def test_a_cluster_without_workers_is_refused_naming_the_address(tmp_path: Path) -> None:
    """runner.address: a scheduler with no worker, or none at all, stops after runner.worker_timeout with a
    RunnerError (exit 2) naming the address. Before, the run waited silently until a worker joined (598 s)."""
    from distributed import LocalCluster

    from crowdflow.contracts.errors import RunnerError, SpecError
    from tasks.runners import dask_executor, scratch_folder

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        with pytest.raises(RunnerError) as exc, dask_executor(address, worker_timeout=1.0):
            pass
    assert f"runner.address {address}: the Dask scheduler has no worker after 1 s" in str(exc.value)
    assert "runner.worker_timeout" in str(exc.value)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(RunnerError) as exc, dask_executor(nobody, worker_timeout=1.0):
        pass
    assert f"runner.address {nobody}: no Dask scheduler answered within 1 s" in str(exc.value)
    # the scratch folder is created, or refused naming it
    assert scratch_folder(str(tmp_path / "a" / "b")) == str(tmp_path / "a" / "b") and (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SpecError, match=r"runner.scratch_dir .*file"):
        scratch_folder(str(tmp_path / "file" / "sub"))


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_a_run_on_a_cluster_without_workers_exits_2(
    tmp_path: Path, rte_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml
    from distributed import LocalCluster

    from flows.cli import main

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        spec = {
            "name": "rte-remote",
            "labels": {"path": str(rte_dir / "labels.csv")},
            "skills": {"method": "pgd"},
            "runner": {"kind": "dask", "address": cluster.scheduler_address, "worker_timeout": 2},
            "cache": {"enabled": False},
            "output": {"dir": str(tmp_path / "out")},
        }
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        assert main(["run", str(tmp_path / "spec.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"runner.address {cluster.scheduler_address}: the Dask scheduler has no worker after 2 s" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("manifest.json"))


def _split_rte(rte_dir: Path, folder: Path, n_files: int = 4) -> None:
    """RTE's labels cut into files of contiguous rows (a task's labels span files), in a shuffled row order."""
    df = pd.read_csv(rte_dir / "labels.csv", dtype=str).sample(frac=1.0, random_state=3).reset_index(drop=True)
    folder.mkdir(parents=True)
    for k, rows in enumerate(np.array_split(np.arange(len(df)), n_files)):
        df.iloc[rows].to_parquet(folder / f"part-{k}.parquet", index=False)


def _run_log(flow_run_id: str, prefix: str, last: str, wait: float = 20.0) -> list[str]:
    """The flow run's log lines that start with ``prefix``, in order, once one starting with ``last`` is there (the
    logs reach the API in batches: polled up to ``wait`` seconds)."""
    import time
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    deadline = time.monotonic() + wait
    while True:
        with get_client(sync_client=True) as client:
            found = client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[UUID(flow_run_id)])),
                sort=LogSort.TIMESTAMP_ASC,
            )
        lines = [entry.message for entry in found if entry.message.startswith(prefix)]
        if any(line.startswith(last) for line in lines) or time.monotonic() > deadline:
            assert any(line.startswith(last) for line in lines), lines
            return lines
        time.sleep(0.5)


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_a_dataset_read_by_the_workers_gives_the_inline_run(
    rte_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """#21: labels as a Parquet dataset (a file:// URL) read, validated and reduced on Dask: the inline run's tables."""
    import flows.skills
    from flows.deploy import run_pipeline

    _split_rte(rte_dir, tmp_path / "labels")
    real, used = flows.skills.runner_executor, []

    def spy(runner):  # type: ignore[no-untyped-def]
        used.append(runner.kind)
        return real(runner)

    monkeypatch.setattr(flows.skills, "runner_executor", spy)
    # method named: auto on a Dask-read input fits ds (no held-out comparison in passes), inline it may choose another
    base = {"name": "rte", "truth": {"path": str(rte_dir / "truth.csv")}, "skills": {"method": "ds"}}
    dask = {"kind": "dask", "n_workers": 2, "processes": False, "partitions": 3, "scratch_dir": str(tmp_path / "s")}
    url = (tmp_path / "labels").as_uri()
    from tasks.progress import add_listener, remove_listener

    seen: list[tuple[str, float]] = []
    add_listener(_record := lambda what, fraction: seen.append((what, fraction)))
    try:
        inline = run_pipeline(
            parse_spec({**base, "labels": {"path": str(tmp_path / "labels")}, "output": {"dir": str(tmp_path / "a")}})
        )
        assert used == []
        # the in-memory EM reports as the partitioned one: its fractions to the listener, its lines to the run's log
        em = [f for what, f in seen if what == "skills fit (ds)"]
        done = em.index(1.0)  # the EM's 1.0, then the task's own at the end of its fit
        assert done > 3 and set(em[done:]) == {1.0} and all(b > a for a, b in itertools.pairwise(em[: done + 1]))
        ma = json.loads((Path(inline["run_dir"]) / "manifest.json").read_text())
        n = ma["fit"]["iterations"]
        lines = _run_log(ma["flow_run_id"], "Dawid-Skene EM pass ", f"Dawid-Skene EM pass {n} of at most ")
        assert lines[0].startswith("Dawid-Skene EM pass 1 of at most ") and 2 <= len(lines) <= n
        seen.clear()
        on_dask = run_pipeline(
            parse_spec({**base, "labels": {"path": url}, "runner": dask, "output": {"dir": str(tmp_path / "b")}})
        )
    finally:
        remove_listener(_record)
    assert used == ["dask"]
    # the EM ran as one task on a Dask worker: its progress reached the flow's callback (the CLI's bar listens
    # here) and its pass lines the flow run's log (the first and the last pass at least)
    em = [f for what, f in seen if what == "skills fit (ds, partitioned)"]
    done = em.index(1.0)  # the job's 1.0, then the task's own at the end of its fit
    assert done > 3 and set(em[done:]) == {1.0} and all(b > a for a, b in itertools.pairwise(em[: done + 1]))
    mb = json.loads((Path(on_dask["run_dir"]) / "manifest.json").read_text())
    lines = _run_log(mb["flow_run_id"], "Dawid-Skene EM pass ", f"Dawid-Skene EM pass {mb['fit']['iterations']} ")
    assert lines[0].startswith("Dawid-Skene EM pass 1 of at most ") and len(lines) >= 2
    a, b = _outputs(inline["run_dir"]), _outputs(on_dask["run_dir"])
    assert set(a) == {"consensus", "skills", "components", "gold_workers", "gold_confusion"}
    assert set(b) == set(a) - {"consensus"}  # the workers wrote it as parts
    parts = sorted((Path(on_dask["run_dir"]) / "consensus").glob("part-*.parquet"))
    assert len(parts) == 3
    b["consensus"] = pd.concat([pd.read_parquet(p) for p in parts]).sort_values("task").reset_index(drop=True)
    a["consensus"] = a["consensus"].sort_values("task").reset_index(drop=True)
    # the Dask run forms no worker pair (ds): distinct co-labellers are not a sum over its buckets, so they are
    # missing there with their reason (docs/scale.md, memory laws); every other number is the inline run's
    from crowdflow.skills.reasons import PARTITIONED_MISSING

    for name, cols in ((n, list(c)) for n, c in PARTITIONED_MISSING.items()):
        assert b[name][cols].isna().all().all() and a[name][cols].notna().all().all()
        assert b[name]["missing_reason"].str.contains(f"{','.join(cols)}: distinct co-labellers").all()
        a[name], b[name] = (t.drop(columns=[*cols, "missing_reason"]) for t in (a[name], b[name]))
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], rtol=1e-9)
    # every metric the Dask run records equals the inline run's; the inline run adds its report's baseline
    # (majority vote) and flagged share, which a partitioned run does not compute yet
    assert set(mb["metrics"]) <= set(ma["metrics"])
    assert set(ma["metrics"]) - set(mb["metrics"]) <= {
        "baseline",
        "baseline_accuracy",
        "flagged_share",
        "accuracy_scoring",
    }
    assert {k: ma["metrics"][k] for k in mb["metrics"]} == pytest.approx(mb["metrics"]) and ma["review"] == mb["review"]
    assert mb["partitioned"]["files"] == 4 and mb["partitioned"]["buckets"] == 3
    assert mb["outputs"]["consensus"] == {"path": "consensus/", "rows": 800, "parts": 3}
    # a file:// URL is its local path (crowdflow.storage.listing.local_path), recorded as such
    assert mb["inputs"][0]["path"] == url.removeprefix("file://") and mb["inputs"][0]["rows"] == 8000
    assert pd.read_parquet(Path(on_dask["run_dir"]) / "consensus").shape[0] == 800  # readable as one dataset


def test_a_bad_file_of_a_dataset_is_named_by_run_and_validate(rte_dir: Path, tmp_path: Path) -> None:
    """A null in one file stops the run (exit 2) naming that file and its row; validate says the same; nothing written."""
    from flows.cli import main

    _split_rte(rte_dir, tmp_path / "labels")
    bad = tmp_path / "labels" / "part-2.parquet"
    df = pd.read_parquet(bad)
    df.loc[4, "label"] = None
    df.to_parquet(bad, index=False)
    spec = {
        "name": "rte",
        "labels": {"path": "labels"},
        "runner": {"kind": "dask", "n_workers": 1, "processes": False},
        "output": {"dir": "out"},
    }
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["validate", str(tmp_path / "spec.yaml")]) == 2
    assert f"{bad}: labels table failed" in err.getvalue() and "row 5 (label=" in err.getvalue()
    assert "1 of 4 files failed validation" in err.getvalue()
    spec["output"] = {"dir": "out", "layout": "hive"}  # either layout: the run stops at the same bad file
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["run", str(tmp_path / "spec.yaml")]) == 2
    assert f"{bad}: labels table failed" in err.getvalue()
    assert not list((tmp_path / "out").rglob("*.parquet")) if (tmp_path / "out").exists() else True


@pytest.mark.parametrize(
    ("source", "runner", "message"),
    [
        ({"path": "s3://bucket/labels/", "storage_options": {"secret": "x"}}, {"kind": "dask"}, "are secrets"),
        ({"path": "labels.csv", "storage_options": {"anon": True}}, {}, "apply to a URL path"),
        ({"path": "s3://user:pw@bucket/labels/"}, {"kind": "dask"}, "the path"),
    ],
)
def test_dataset_sources_are_checked_in_the_spec(source: dict, runner: dict, message: str) -> None:  # type: ignore[type-arg]
    from pydantic import ValidationError

    from crowdflow.contracts.errors import SpecError

    with pytest.raises((SpecError, ValidationError), match=message):
        parse_spec({"name": "x", "labels": source, "runner": runner})
    # a remote URL is accepted for any input and any runner: the flow reads it through fsspec where the workers don't
    for spec in (
        {"name": "x", "labels": {"path": "s3://b/l/"}},
        {"name": "x", "labels": {"path": "l.csv"}, "truth": {"path": "s3://b/t/"}, "runner": {"kind": "dask"}},
    ):
        assert parse_spec(spec).name == "x"


def _planted_comparisons(folder: Path, n_files: int = 4) -> pd.DataFrame:
    from crowdflow.synth.ranking import comparison_table, issue_instance

    g = issue_instance(0).graph
    df = comparison_table(g.i, g.j, g.y, None, np.array([f"a{k % 37}" for k in range(g.m)]))
    df["item_a"] = "item-" + df["item_a"].astype(str)
    df["item_b"] = "item-" + df["item_b"].astype(str)
    df = df.sample(frac=1.0, random_state=0).reset_index(drop=True)
    folder.mkdir(parents=True)
    for k, rows in enumerate(np.array_split(np.arange(len(df)), n_files)):
        df.iloc[rows].to_parquet(folder / f"part-{k}.parquet", index=False)
    return df


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_a_comparison_dataset_read_by_the_workers_gives_the_inline_trimmed_run(tmp_path: Path) -> None:
    """#21 ranking: comparisons read, validated and reduced by Dask workers; outliers: trimmed gives the in-memory
    run's tables (ranking, components, annotators, the flagged rows); lbi is refused for such a run."""
    from crowdflow.contracts.errors import SpecError
    from flows.deploy import run_pipeline

    df = _planted_comparisons(tmp_path / "cmp")
    df.to_csv(tmp_path / "cmp.csv", index=False)
    base = {"name": "rk", "job": "ranking", "ranking": {"outliers": "trimmed"}}
    inline = run_pipeline(
        parse_spec({**base, "comparisons": {"path": str(tmp_path / "cmp.csv")}, "output": {"dir": str(tmp_path / "a")}})
    )
    dask = {"kind": "dask", "n_workers": 2, "processes": False}
    spec = {
        **base,
        "comparisons": {"path": str(tmp_path / "cmp")},
        "runner": dask,
        "output": {"dir": str(tmp_path / "b")},
    }
    on_dask = run_pipeline(parse_spec(spec))
    a, b = _outputs(inline["run_dir"]), _outputs(on_dask["run_dir"])
    parts = sorted((Path(on_dask["run_dir"]) / "outliers").glob("part-*.parquet"))
    assert len(parts) == 4 and set(a) == {"ranking", "components", "annotators", "outliers"} == {*b, "outliers"}
    b["outliers"] = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    key = ["item_a", "item_b", "annotator", "outcome"]
    for name in ("outliers",):  # row ids are positions in a file: compare the rows themselves
        a[name] = a[name].drop(columns=["part", "row_id"]).sort_values(key).reset_index(drop=True)
        b[name] = b[name].drop(columns=["part", "row_id"]).sort_values(key).reset_index(drop=True)
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], rtol=1e-9)
    assert len(a["outliers"]) > 0.08 * len(df)  # the planted 10 % are found, not an empty table compared
    mb = json.loads((Path(on_dask["run_dir"]) / "manifest.json").read_text())
    assert mb["outputs"]["outliers"]["parts"] == 4 and mb["partitioned"]["passes"] > 3
    with pytest.raises(SpecError, match=r"ranking\.outliers lbi follows a path"):
        run_pipeline(parse_spec({**spec, "ranking": {"outliers": "lbi"}}))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_million_labels_and_comparisons_through_crowdflow_run_on_worker_processes(tmp_path: Path) -> None:
    """#21 at 10^6 rows: `crowdflow run` with the workers (2 processes) reading 10 files; equal to the library fit."""
    from flows.cli import main

    rng = np.random.default_rng(21)
    n_tasks, n_workers = 200_000, 500
    skill = rng.uniform(0.2, 0.9, n_workers)
    truth = rng.integers(0, 2, n_tasks)
    task = np.repeat(np.arange(n_tasks), 5)
    worker = (task * 7 + np.tile(np.arange(5) * 101, n_tasks) + rng.integers(0, n_workers, task.size)) % n_workers
    keep = ~pd.DataFrame({"t": task, "w": worker}).duplicated().to_numpy()
    task, worker = task[keep], worker[keep]
    label = np.where(rng.random(task.size) < (1 + skill[worker]) / 2, truth[task], 1 - truth[task])
    labels = pd.DataFrame(
        {"task": "t" + task.astype(str), "worker": "w" + worker.astype(str), "label": label.astype(str)}
    )
    (tmp_path / "labels").mkdir()
    for k, rows in enumerate(np.array_split(rng.permutation(len(labels)), 10)):
        labels.iloc[rows].to_parquet(tmp_path / "labels" / f"part-{k}.parquet", index=False)
    items = np.array([f"i{k}" for k in range(300)])
    theta = rng.normal(size=items.size)
    a, b = rng.integers(0, items.size, 10**6), rng.integers(0, items.size, 10**6)
    ok = a != b
    cmp = pd.DataFrame({"annotator": "a" + (np.arange(ok.sum()) % 997).astype(str), "item_a": items[a[ok]]})
    cmp["item_b"] = items[b[ok]]
    cmp["outcome"] = theta[a[ok]] - theta[b[ok]] + rng.normal(0, 0.5, ok.sum())
    (tmp_path / "cmp").mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(cmp)), 10)):
        cmp.iloc[rows].to_parquet(tmp_path / "cmp" / f"part-{k}.parquet", index=False)
    runner = {"kind": "dask", "n_workers": 2, "processes": True, "memory_limit": "3GB"}
    specs = {
        "skills.yaml": {"name": "big", "labels": {"path": "labels"}, "runner": runner, "output": {"dir": "out"}},
        "rank.yaml": {
            "name": "bigrank",
            "job": "ranking",
            "comparisons": {"path": "cmp"},
            "ranking": {"outliers": "none", "diagnostics": False},
            "runner": runner,
            "output": {"dir": "out"},
        },
    }
    for name, spec in specs.items():
        (tmp_path / name).write_text(json.dumps(spec))
        assert main(["run", str(tmp_path / name)]) == 0
    run = next((tmp_path / "out" / "big").iterdir())
    got = pd.read_parquet(run / "consensus").set_index("task")["label"]
    want = fit_skills(labels, tie_break="smallest").consensus.set_index("task")["label"]
    assert len(got) == n_tasks and (got.reindex(want.index) == want).mean() > 0.999  # ties may break otherwise
    ranked = pd.read_parquet(next((tmp_path / "out" / "bigrank").iterdir()) / "ranking.parquet").set_index("item")
    assert np.corrcoef(ranked["score"].reindex(items), theta)[0, 1] > 0.99


def test_whole_table_rules_are_checked_on_the_dataset_not_per_file(tmp_path: Path) -> None:
    """A file may hold one class, and a (task, worker) pair repeated inside a file is the duplicate policy's to
    settle: per file only the row rules run; the distinct-labels rule and the duplicates are checked on the whole."""
    from flows.cli import main

    folder = tmp_path / "labels"
    folder.mkdir()
    rows = [(f"t{t}", f"w{w}") for t in range(6) for w in range(3)]
    pd.DataFrame([(t, w, "yes") for t, w in rows[:9]], columns=["task", "worker", "label"]).to_parquet(
        folder / "a.parquet"
    )
    second = [(t, w, "no") for t, w in rows[9:]] + [(rows[0][0], rows[0][1], "no")]  # repeats a pair of a.parquet
    pd.DataFrame(second, columns=["task", "worker", "label"]).to_parquet(folder / "b.parquet")
    spec = {"name": "x", "labels": {"path": "labels"}, "runner": {"kind": "dask"}, "output": {"dir": "out"}}

    def validate(**skills: Any) -> tuple[int, str]:
        (tmp_path / "spec.yaml").write_text(json.dumps({**spec, "skills": skills}))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["validate", str(tmp_path / "spec.yaml")])
        return code, err.getvalue()

    assert validate(duplicates="keep_last")[0] == 0  # one class per file, the repeat settled by the policy
    code, err = validate()
    assert code == 2 and "a.parquet row 1" in err and "b.parquet row 10" in err
    (folder / "b.parquet").unlink()
    code, err = validate()
    assert code == 2 and "at least 2 distinct values" in err
    assert validate(classes=["yes", "no"])[0] == 0


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_an_agents_dataset_read_by_the_workers_gives_the_inline_blocked_run(tmp_path: Path) -> None:
    """#21 personal models: the agents' samples are read, validated and turned into losses by the Dask workers (the
    flow holds the graph and the models); the tables equal the in-memory djam_blocked run's. Other methods are refused
    before any step, and a table that admits no fit exits 2 naming the dataset, with nothing written."""
    from crowdflow.contracts.errors import SpecError
    from flows.cli import main
    from flows.deploy import run_pipeline

    inst = field_estimation_instance(8, n=60, radius=0.25)
    agents = inst.agents.sample(frac=1.0, random_state=1).reset_index(drop=True)  # an agent's rows span files
    agents.to_csv(tmp_path / "agents.csv", index=False)
    inst.edges.to_csv(tmp_path / "edges.csv", index=False)
    (tmp_path / "agents").mkdir()
    for k, rows in enumerate(np.array_split(np.arange(len(agents)), 3)):
        agents.iloc[rows].to_parquet(tmp_path / "agents" / f"part-{k}.parquet", index=False)
    opts = {"method": "djam_blocked", "loss": "huber", "n_blocks": 4, "reg": 0.1, "seed": 2, "tol": 1e-9}
    base = {"name": "pm", "job": "personal_models", "edges": {"path": str(tmp_path / "edges.csv")}}
    inline = run_pipeline(
        parse_spec(
            {
                **base,
                "agents": {"path": str(tmp_path / "agents.csv")},
                "personal_models": opts,
                "output": {"dir": str(tmp_path / "a")},
            }
        )
    )
    spec = {
        **base,
        "agents": {"path": str(tmp_path / "agents")},
        "personal_models": opts,
        "runner": {"kind": "dask", "n_workers": 2, "processes": False},
        "output": {"dir": str(tmp_path / "b")},
    }
    on_dask = run_pipeline(parse_spec(spec))
    a, b = _outputs(inline["run_dir"]), _outputs(on_dask["run_dir"])
    assert set(a) == set(b) == {"personal_models", "convergence"}
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], rtol=1e-12, atol=1e-14)
    optimum = centralized(build_problem(agents, inst.edges, loss="huber", reg=0.1)).theta[:, 0]
    fitted = b["personal_models"].set_index("agent")["theta"].sort_index().to_numpy()
    assert np.abs(fitted - optimum).max() < 1e-7 < np.ptp(optimum)  # the certified optimum, not a constant
    mb = json.loads((Path(on_dask["run_dir"]) / "manifest.json").read_text())
    assert mb["partitioned"]["files"] == 3 and mb["partitioned"]["blocks"] == 4 and mb["partitioned"]["passes"] > 3
    assert mb["inputs"][0]["name"] == "agents" and mb["inputs"][0]["rows"] == len(agents)
    assert mb["metrics"]["converged"] is True

    with pytest.raises(SpecError, match=r"personal_models.method djam holds every agent's data in one process"):
        run_pipeline(parse_spec({**spec, "personal_models": {**opts, "method": "djam"}}))
    bad = pd.read_parquet(tmp_path / "agents" / "part-1.parquet")
    bad["reg"] = 0.5  # a per-agent setting in one file only: the agents of the other files have none
    bad.to_parquet(tmp_path / "agents" / "part-1.parquet", index=False)
    spec["output"] = {"dir": str(tmp_path / "c")}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", str(tmp_path / "spec.yaml")])
    assert code == 2, err.getvalue()
    assert f"{tmp_path / 'agents'}: agents: column 'reg': missing or non-finite value for agent(s) [a" in err.getvalue()
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("manifest.json"))


def test_validate_reads_a_comparisons_or_agents_dataset_file_by_file(tmp_path: Path) -> None:
    """crowdflow validate on a dataset the workers would read: one file at a time, given as a folder or a URL (a
    ranking dataset given as a file:// URL once failed with 'file not found'); a bad file is named with its row."""
    from flows.cli import main

    rng = np.random.default_rng(3)
    (tmp_path / "cmp").mkdir()
    for k in range(3):
        pd.DataFrame(
            {
                "annotator": [f"u{i}" for i in rng.integers(0, 5, 40)],
                "item_a": [f"i{i}" for i in rng.integers(0, 6, 40)],
                "item_b": [f"j{i}" for i in rng.integers(0, 6, 40)],
                "outcome": rng.normal(size=40),
            }
        ).to_parquet(tmp_path / "cmp" / f"part-{k}.parquet", index=False)
    spec = {
        "name": "rk",
        "job": "ranking",
        "comparisons": {"path": (tmp_path / "cmp").as_uri()},
        "ranking": {"outliers": "trimmed"},
        "runner": {"kind": "dask"},
        "output": {"dir": str(tmp_path / "out")},
    }
    (tmp_path / "rk.yaml").write_text(json.dumps(spec))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["validate", str(tmp_path / "rk.yaml")]) == 0
    assert "120 rows in 3 Parquet files (read by the Dask workers at run time), every file passed validation" in (
        out.getvalue()
    )
    assert "item comparison graph: 1 component(s)" in out.getvalue()

    inst = field_estimation_instance(2, n=20)
    (tmp_path / "agents").mkdir()
    inst.agents.iloc[:10].to_parquet(tmp_path / "agents" / "a.parquet", index=False)
    bad = inst.agents.iloc[10:].copy()
    bad.loc[bad.index[2], "agent"] = None
    bad.to_parquet(tmp_path / "agents" / "b.parquet", index=False)
    inst.edges.to_csv(tmp_path / "edges.csv", index=False)
    pm = {
        "name": "pm",
        "job": "personal_models",
        "agents": {"path": str(tmp_path / "agents")},
        "edges": {"path": str(tmp_path / "edges.csv")},
        "personal_models": {"method": "djam_blocked", "loss": "huber"},
        "runner": {"kind": "dask"},
        "output": {"dir": str(tmp_path / "out")},
    }
    (tmp_path / "pm.yaml").write_text(json.dumps(pm))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["validate", str(tmp_path / "pm.yaml")]) == 2
    assert f"{tmp_path / 'agents' / 'b.parquet'}" in err.getvalue() and "row 3" in err.getvalue(), err.getvalue()
