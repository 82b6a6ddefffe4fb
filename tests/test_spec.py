"""Spec parsing: safe YAML, strict keys, safe names, relative paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from crowdflow.errors import SpecError
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
    assert "8000 rows, 5 expectations passed" in lines[1]
    assert lines[-1] == "worker graph: 1 components {'ok': 1}"
