"""The ranking flow encodes its comparisons once: the graph check builds the comparison graph the fit takes, the
check still blocks a bad graph before any fit, and a cached fit (stored by tasks.results) reads back equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import crowdflow.ranking.fit
import tasks.check_graph
import tasks.fit
from crowdflow.contracts.errors import GraphCheckFailed
from crowdflow.spec import parse_spec
from flows.ranking import ranking_flow

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def _comparisons(path: Path, disconnected: bool = False) -> None:
    rng = np.random.default_rng(3)
    n_items, m = 12, 400
    a = rng.integers(0, n_items, m)
    if disconnected:  # items i0-i5 and i6-i11 never meet
        half = n_items // 2
        base = (a // half) * half
        b = base + (a - base + rng.integers(1, half, m)) % half
    else:
        b = (a + rng.integers(1, n_items, m)) % n_items
    y = np.where(rng.random(m) < 0.8, 1.0, -1.0) * np.sign(b - a)
    pd.DataFrame(
        {
            "annotator": rng.integers(0, 7, m).astype(str),
            "item_a": [f"i{k}" for k in a],
            "item_b": [f"i{k}" for k in b],
            "outcome": y,
        }
    ).to_csv(path, index=False)


def _spec(tmp_path: Path, **extra: Any) -> Any:
    return parse_spec(
        {"name": "rk", "job": "ranking", "comparisons": {"path": "cmp.csv"}, "output": {"dir": "out"}, **extra},
        base_dir=tmp_path,
    )


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count every comparison-graph build (the check's and the fit's) and every fit."""
    calls = {"build": 0, "fit": 0}

    def counted(key: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[key] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        tasks.check_graph, "build_comparison_graph", counted("build", tasks.check_graph.build_comparison_graph)
    )
    monkeypatch.setattr(
        crowdflow.ranking.fit, "build_comparison_graph", counted("build", crowdflow.ranking.fit.build_comparison_graph)
    )
    monkeypatch.setattr(tasks.fit, "fit_ranking", counted("fit", tasks.fit.fit_ranking))
    return calls


def test_the_comparisons_are_encoded_once_and_cached_fits_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _comparisons(tmp_path / "cmp.csv")
    calls = _counting(monkeypatch)
    first = ranking_flow(_spec(tmp_path))
    assert calls == {"build": 1, "fit": 1}  # the check's graph is the fit's: one encoding per run
    run = Path(first["run_dir"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["checks"]["item_components"] == 1
    # the run writes what the library writes from the table
    ref = crowdflow.ranking.fit_ranking(pd.read_csv(tmp_path / "cmp.csv", dtype={"annotator": str}))
    got = pd.read_parquet(run / "ranking.parquet")
    np.testing.assert_allclose(got.sort_values("item")["score"], ref.tables["ranking"].sort_values("item")["score"])
    again = ranking_flow(_spec(tmp_path))  # answered from the cache (stored by tasks.results.FIT_RESULTS)
    second = json.loads((Path(again["run_dir"]) / "manifest.json").read_text())
    assert second["cache"]["hit"] and second["cache"]["key"] == manifest["cache"]["key"]
    assert calls["fit"] == 1
    for name in ("ranking", "outliers", "annotators"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(Path(again["run_dir"]) / f"{name}.parquet"), pd.read_parquet(run / f"{name}.parquet")
        )


def test_a_disconnected_graph_is_blocked_before_any_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _comparisons(tmp_path / "cmp.csv", disconnected=True)
    calls = _counting(monkeypatch)
    with pytest.raises(GraphCheckFailed, match="item comparison graph has 2 connected components"):
        ranking_flow(_spec(tmp_path, checks={"connectivity": "block"}))
    assert calls == {"build": 1, "fit": 0}
    assert not list((tmp_path / "out").rglob("manifest.json"))  # nothing written


def test_the_trimmed_rule_fits_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _comparisons(tmp_path / "cmp.csv")
    calls = _counting(monkeypatch)
    summary = ranking_flow(_spec(tmp_path, ranking={"outliers": "trimmed"}, cache={"enabled": False}))
    assert calls["fit"] == 1
    assert (Path(summary["run_dir"]) / "ranking.parquet").is_file()
