"""Spec parsing: safe YAML, strict keys, safe names, relative paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from crowdflow.contracts.errors import SpecError
from crowdflow.spec import load_spec, parse_spec
from flows.pipeline import check_locations, check_spec


def test_load_resolves_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("name: p1\nlabels:\n  path: data/l.csv\n")
    spec = load_spec(tmp_path / "s.yaml")
    assert spec.path_of(spec.labels) == tmp_path.resolve() / "data" / "l.csv"
    assert spec.output_dir() == tmp_path.resolve() / "crowdflow-out"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: ../evil\nlabels: {path: l.csv}\n", "name"),
        ("name: ok\nlabels: {path: l.csv}\nunknown_key: 1\n", "unknown_key"),
        ("name: ok\n", "labels"),
        ("name: ok\nlabels: {path: l.csv}\nskills: {method: magic}\n", "skills.method"),
        ("name: ok\nlabels: {path: l.csv}\nskills: {classes: [a]}\n", "at least 2"),
        ("- a\n- b\n", "mapping"),
        ("name: !!python/object/apply:os.system ['echo hi']\n", "not valid YAML"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_specs(tmp_path: Path, text: str, words: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match=words) as err:
        load_spec(p)
    assert str(p) in str(err.value)


def test_output_dir_may_not_be_input_dir(tmp_path: Path) -> None:
    spec = parse_spec({"name": "p", "labels": {"path": "l.csv"}, "output": {"dir": "."}}, base_dir=tmp_path)
    with pytest.raises(SpecError, match="input folder"):
        check_locations(spec)


def test_check_spec_reports_graph(tmp_path: Path, rte_dir: Path) -> None:
    spec = parse_spec({"name": "p", "labels": {"path": str(rte_dir / "labels.csv")}, "output": {"dir": str(tmp_path)}})
    lines = check_spec(spec)
    assert "8000 rows, 7 expectations passed" in lines[1]
    assert lines[-1] == "worker graph: 1 components {'ok': 1}"


# ---------------------------------------------------------------------------------------------
# spec hardening (issue #9, item 4)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['echo hi']",
        "!!python/object:pathlib.Path {}",
        "!!python/name:os.system",
    ],
)
def test_python_tags_are_refused(tmp_path: Path, tag: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(f"name: ok\nlabels: {{path: l.csv}}\noutput:\n  dir: {tag}\n")
    with pytest.raises(SpecError, match=r"tags like !!python/\.\.\. are not allowed") as err:
        load_spec(p)
    assert str(p) in str(err.value) and "line 4" in str(err.value)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("..", "one folder, not a path"),
        ("../evil", "one folder, not a path"),
        ("a/b", "one folder, not a path"),
        ("/etc", "one folder, not a path"),
        ("a\\b", "one folder, not a path"),
        ("~root", "one folder, not a path"),
        (".hidden", "one folder, not a path"),
        ("a\x00b", "NUL"),
        ("x" * 129, "129 characters"),
        ("ok\n", "use 1-128 letters"),
        ("", "use 1-128 letters"),
        ("naïve", "use 1-128 letters"),
        ("has space", "use 1-128 letters"),
    ],
)
def test_unsafe_pipeline_names_are_refused(tmp_path: Path, name: str, why: str) -> None:
    with pytest.raises(SpecError, match="pipeline name") as err:
        parse_spec({"name": name, "labels": {"path": "l.csv"}}, base_dir=tmp_path)
    assert why in str(err.value)


def test_safe_names_pass_and_run_ids_are_checked(tmp_path: Path) -> None:
    from crowdflow.spec import check_name
    from crowdflow.storage.run_store import write_run
    from flows.pipeline import run_spec

    for ok in ("a", "rte-skills_2.v1", "0" * 128):
        assert check_name(ok) == ok
    spec = parse_spec({"name": "p", "labels": {"path": "l.csv"}, "output": {"dir": "out"}}, base_dir=tmp_path)
    with pytest.raises(SpecError, match=r"invalid run id '\.\./x'"):
        run_spec(spec, run_id="../x")  # refused before any flow or file work
    with pytest.raises(ValueError, match="invalid run id"):
        write_run(tmp_path, "p", "r\n", {}, {})
    assert not (tmp_path / "out").exists() and not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ({"input": "data/l.csv", "out": "data"}, "is the input folder of"),
        ({"input": "data/l.csv", "out": "data/l.csv"}, "is the input folder of"),
        ({"input": "ds", "out": "ds"}, "is the input folder of"),  # a Parquet folder
        ({"input": "ds", "out": "ds/runs"}, "is the input folder of"),
        ({"input": "out/in/l.csv", "out": "out"}, "is inside the output dir"),
        ({"input": "l.csv", "out": "."}, "is the input folder of"),
    ],
)
def test_inputs_and_output_never_overlap(tmp_path: Path, layout: dict[str, str], words: str) -> None:
    src = tmp_path / layout["input"]
    if src.suffix:
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text("task,worker,label\n")
    else:
        src.mkdir(parents=True)
    spec = parse_spec(
        {"name": "p", "labels": {"path": layout["input"]}, "output": {"dir": layout["out"]}}, base_dir=tmp_path
    )
    with pytest.raises(SpecError, match=words):
        check_locations(spec)


def test_output_beside_inputs_is_fine(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text("task,worker,label\n")
    for out in ("crowdflow-out", "../elsewhere"):
        spec = parse_spec({"name": "p", "labels": {"path": "l.csv"}, "output": {"dir": out}}, base_dir=tmp_path)
        check_locations(spec)


def test_the_bipartite_rule_blocks_only_the_rank_one_method(tmp_path: Path) -> None:
    """Dawid-Skene (the default) and majority vote do not estimate rank-one skills: a bipartite worker graph is
    reported, not blocking; with method pgd it blocks unless the spec says warn."""
    for method, want in (("pgd", "block"), ("ds", "warn"), ("mv", "warn"), ("onecoin_ds", "warn")):
        spec = parse_spec({"name": "p", "labels": {"path": "l.csv"}, "skills": {"method": method}}, base_dir=tmp_path)
        assert spec.check_modes()["identifiability"] == want, method
    warn = parse_spec(
        {"name": "p", "labels": {"path": "l.csv"}, "skills": {"method": "pgd"}, "checks": {"identifiability": "warn"}}
    )
    assert warn.check_modes()["identifiability"] == "warn"
