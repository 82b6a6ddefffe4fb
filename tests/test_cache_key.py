"""The fit cache key follows every setting that can change a fit (issue #18 class 1, issue #25 item 2).

The key (:func:`crowdflow.storage.fingerprints.fit_key` over :func:`flows.pipeline.fit_data`) hashes what the fit
receives after reading, mapping, coercion, the duplicate policy, validation and encoding, plus the job's
options, where the fit runs and the code's identity. This test walks every leaf field of the pipeline spec, for
several jobs, gives it another valid value and shows that the key changes, or that the field is one that cannot
change what the fit receives (listed in NEUTRAL with the reason). Before, the key was the input file's sha256
plus the options: fixing a swapped `columns:` mapping was answered from the cache with the old consensus.
"""

from __future__ import annotations

import shutil
import typing
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pytest
from pydantic import BaseModel

from crowdflow.contracts.errors import CrowdflowError
from crowdflow.spec import JOB_INPUTS_ALL, JOB_MODELS, JOB_OPTIONS, PipelineBase, parse_spec
from crowdflow.storage.fingerprints import code_identity, data_fingerprint, fit_key
from flows.pipeline import fit_data, prepare

DATA = Path(__file__).resolve().parents[1] / "crowdflow" / "data"

# Fields that cannot change what a fit receives, and why. Everything else must move the key.
NEUTRAL = {
    "name": "the output folder's name",
    "base_dir": "where relative paths start; the files read are hashed, not their names",
    "output": "where and how results are written (folder, layout, report, warehouse)",
    "cache": "whether and how long a result is reused, not what is computed",
    "checks.validation": "block or warn on invalid rows: a fit that runs receives the same validated table",
    "checks.identifiability": "block or warn: a skills fit flags unidentifiable components either way",
    "checks.isolated_workers": "block or warn: isolated workers are fitted the same either way",
    "runner.n_workers": "the size of a local cluster: the statistics are exact sums, the same on any size",
    "runner.processes": "processes or threads of a local cluster: the same sums",
    "runner.partitions": "how the co-label counts are split: integer sums, the same result",
    "runner.scratch_dir": "where partition files are written, not their content",
    "runner.memory_limit": "memory per worker of a local cluster: the same sums on any limit",
    "runner.worker_timeout": "how long to wait for a cluster's workers, not what they compute",
    "storage_options": "how a URL's file system is opened; the rows it yields are hashed",
    "password_env": "where a password comes from; the rows it lets through are hashed",
    "truth": "gold labels are scored against the consensus after the fit; they never enter it",
    "format": "how a file is parsed: the rows it yields are hashed, so the same rows give the same fit",
    "password_secret": "where a password comes from; the rows it lets through are hashed",
    # a source's kind (file, folder, URL, query) follows from its path or sql; the rows it yields are hashed
    **{f"{k}.kind": "which form a source is given in; the rows it yields are hashed" for k in JOB_INPUTS_ALL},
}


def _neutral(path: str, job: str) -> str | None:
    if path in NEUTRAL or path.split(".")[0] in NEUTRAL or path.split(".")[-1] in NEUTRAL:
        return NEUTRAL.get(path) or NEUTRAL.get(path.split(".")[0]) or NEUTRAL[path.split(".")[-1]]
    block = path.split(".")[0]
    if block in set(JOB_OPTIONS.values()) and block != JOB_OPTIONS[job]:
        return "another job's options are never read"
    if path.startswith("checks.connectivity") and job != "personal_models":
        return "connectivity blocks or warns; only personal models fit differently (allow_disconnected)"
    return None


def _copy_inputs(tmp: Path, job: str) -> dict[str, Any]:
    samples = DATA / "samples"
    if job == "skills":
        shutil.copy(DATA / "snow_wsd" / "labels.csv", tmp / "labels.csv")
        shutil.copy(DATA / "snow_wsd" / "truth.csv", tmp / "truth.csv")
        return {"labels": {"path": "labels.csv"}, "truth": {"path": "truth.csv"}}
    if job in ("ranking", "personal_rankings"):
        name = "comparisons.csv" if job == "ranking" else "personal_comparisons.csv"
        shutil.copy(samples / name, tmp / "comparisons.csv")
        return {"comparisons": {"path": "comparisons.csv"}}
    if job == "personal_models":
        shutil.copy(samples / "agents.csv", tmp / "agents.csv")
        shutil.copy(samples / "edges.csv", tmp / "edges.csv")
        return {"agents": {"path": "agents.csv"}, "edges": {"path": "edges.csv"}}
    shutil.copy(samples / "candidates.csv", tmp / "candidates.csv")
    cand = pd.read_csv(tmp / "candidates.csv", dtype=str)
    pd.DataFrame({"worker": sorted(cand["worker"].unique()), "capacity": 3}).to_csv(tmp / "caps.csv", index=False)
    return {"candidates": {"path": "candidates.csv"}, "worker_caps": {"path": "caps.csv"}}


def _key(spec: PipelineBase) -> tuple[str, str]:
    """The fit's cache key, and a fingerprint of everything the fit receives (data, options, settings)."""
    prepared = prepare(spec, validate=False)  # validation blocks or passes; it never changes a row
    data, settings = fit_data(spec, prepared.frames, prepared.lm, prepared.skills_run)
    options = getattr(spec, JOB_OPTIONS[spec.job])
    where = (spec.runner.kind, spec.runner.address)
    return fit_key(spec.job, data, options, where, **settings), data_fingerprint(data, options, settings, where)


def _leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        inner = args[0] if len(args) == 1 and typing.get_origin(ann) is not Literal else ann
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            out += _leaves(inner, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", field))
    return out


NUMBERS = [2, 3, 0.5, 0.1, 10, 1e-3, 100, 1e-9, 0.9, 7, 1000, 0.01, 1]


def _candidates(path: str, field: Any, tmp: Path) -> list[Any]:
    ann = field.annotation
    default = field.get_default(call_default_factory=True)
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    inner = args[0] if len(args) == 1 else ann
    leaf = path.split(".")[-1]
    if leaf == "columns":
        return ["swap"]
    if leaf == "path":
        return ["edited"]
    if leaf == "format":
        return ["csv", "parquet"]
    if typing.get_origin(inner) is Literal:
        return [v for v in typing.get_args(inner) if v != default]
    if inner is bool:
        return [not default]
    if inner in (int, float) or set(args) <= {int, float, list[int]}:
        return [v for v in NUMBERS if v != default]
    if leaf == "classes":
        return ["declared"]
    if leaf in ("features",):
        return [["y"], []]
    if leaf == "prune_spammers":
        return [[0.1, 0.2]]
    if leaf == "address" or leaf == "dask_address":
        return ["tcp://127.0.0.1:1"]
    return ["x"]


def _apply(data: dict[str, Any], path: str, value: Any, tmp: Path, job: str) -> dict[str, Any]:
    import copy

    d = copy.deepcopy(data)
    *blocks, leaf = path.split(".")
    node = d
    for b in blocks:
        node = node.setdefault(b, {})
    if leaf == "columns":  # the example: two id columns swapped
        first = next(iter(k for k in data if isinstance(data[k], dict) and "path" in data[k]))
        df = pd.read_csv(tmp / data[first]["path"], dtype=str, nrows=1)
        a, b = list(df.columns)[:2]
        node[leaf] = {a: b, b: a}
    elif leaf == "path":
        src = tmp / node["path"]
        df = pd.read_csv(src, dtype=str)
        col = df.columns[-1]
        first = str(df[col].iloc[0])
        others = [v for v in df[col].unique() if v != first]
        df.loc[0, col] = others[0] if others else (str(int(first) + 1) if first.isdigit() else first + "x")
        edited = src.with_name("edited-" + src.name)
        df.to_csv(edited, index=False)
        node["path"] = edited.name
    elif leaf == "format" and value == "parquet":
        src = tmp / node["path"]
        pq = src.with_suffix(".parquet")
        pd.read_csv(src, dtype=str).to_parquet(pq)
        node["path"], node["format"] = pq.name, "parquet"
    elif leaf == "classes":
        labels = pd.read_csv(tmp / "labels.csv", dtype=str)["label"].unique().tolist() if job == "skills" else ["a"]
        node[leaf] = [*labels, "never-used"]
    elif leaf == "runner" or (blocks[:1] == ["runner"] and leaf == "address"):
        node["kind"] = "dask"
        node[leaf] = value
    else:
        node[leaf] = value
    return d


JOBS = ["skills", "ranking", "personal_rankings", "personal_models", "assignment"]


@pytest.mark.parametrize(
    "job", [j if j in ("skills", "ranking") else pytest.param(j, marks=pytest.mark.slow) for j in JOBS]
)  # the key's rule is one for every job; the other three jobs' fields run in the slow tier
def test_every_spec_field_moves_the_fit_key_or_cannot_change_the_fit(job: str, tmp_path: Path) -> None:
    base: dict[str, Any] = {"name": "key", "job": job, "output": {"dir": "out"}, **_copy_inputs(tmp_path, job)}
    base_key, base_received = _key(parse_spec(base, base_dir=tmp_path))
    assert (base_key, base_received) == _key(parse_spec(base, base_dir=tmp_path))  # deterministic
    sources = {k for k, v in base.items() if isinstance(v, dict) and "path" in v}
    moved: list[str] = []
    neutral: list[str] = []
    unmoved: list[str] = []
    not_applicable: list[str] = []
    for path, field in _leaves(JOB_MODELS[job]):
        top = path.split(".")[0]
        is_source = top in JOB_INPUTS_ALL
        if is_source and (top not in sources or path.split(".")[-1] in ("sql", "params", "connection")):
            not_applicable.append(path)  # a source the job lacks, or query fields of a file source
            continue
        if path in ("job", "skills_run"):
            not_applicable.append(path)
            continue
        reason = _neutral(path, job)
        changed = False
        tried = 0
        for value in _candidates(path, field, tmp_path):
            try:
                spec = parse_spec(_apply(base, path, value, tmp_path, job), base_dir=tmp_path)
                key, received = _key(spec)
            except (CrowdflowError, ValueError):
                continue
            tried += 1
            if tried > 2 and changed:
                break
            # the rule itself: the key moves exactly when what the fit receives (or where it runs) moves
            assert (key != base_key) == (received != base_received), f"{job}: {path}={value!r}"
            changed |= key != base_key
        if reason is not None:
            neutral.append(path)
            assert not changed or path.startswith("runner"), (
                f"{job}: {path} is listed neutral ({reason}) but moved the key"
            )
        elif changed:
            moved.append(path)
        else:  # every valid other value left what the fit receives unchanged (checked by the rule above)
            unmoved.append(path)
    # every file, every option of the job and the runner's address move the key; a swapped id mapping too
    options = JOB_OPTIONS[job]
    assert {f"{k}.path" for k in sources if k != "truth"} <= set(moved)
    assert {p for p, _ in _leaves(JOB_MODELS[job]) if p.startswith(f"{options}.")} - set(moved) <= set(unmoved)
    assert "runner.address" in moved and "runner.kind" in moved
    if job in ("skills", "ranking", "personal_rankings", "assignment"):
        assert any(p.endswith(".columns") for p in moved)
    # options whose other values never reached the fit are few and known (e.g. a seed a deterministic method ignores)
    assert len(unmoved) <= max(3, len(moved) // 3), unmoved


def test_code_identity_names_the_source_in_a_development_install() -> None:
    ident = code_identity()
    assert ident.split("+")[0]  # the version
    assert "+src." in ident  # the test suite runs from an editable install: the sources are hashed
