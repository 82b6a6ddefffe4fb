"""Tests for crowdflow.ranking.fit: the entry points and their tables (docs/methods/ranking.md §7, §8.1 tests 2, 3, 24)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.ranking.fit import fit_hlasso, fit_hodgerank, fit_lbi, fit_ranking
from crowdflow.ranking.graph import check_comparison_graph
from crowdflow.synth.ranking import comparison_table, huber_instance, mm13_instance


def test_orientation_invariance():
    """Test 2 of docs/methods/ranking.md §8.1: flipping rows (i,j,y)→(j,i,−y) leaves θ unchanged and negates γ and residuals."""
    g = huber_instance(3).graph
    rng = np.random.default_rng(7)
    flip = rng.random(g.m) < 0.4
    i2 = np.where(flip, g.j, g.i)
    j2 = np.where(flip, g.i, g.j)
    y2 = np.where(flip, -g.y, g.y)
    df1 = comparison_table(g.i, g.j, g.y)
    df2 = comparison_table(i2, j2, y2)
    sgn = np.where(flip, -1.0, 1.0)
    for fit in (
        lambda d: fit_hlasso(d, lambda_rule="fixed", lam=1.0, diagnostics=False),
        lambda d: fit_ranking(d, outliers="lbi", stop_rule="time", t_stop=1.0, diagnostics=False),
    ):
        r1, r2 = fit(df1), fit(df2)
        s1 = r1.scores.set_index("item")
        s2 = r2.scores.set_index("item").loc[s1.index]
        np.testing.assert_allclose(s1["score_robust"], s2["score_robust"], atol=1e-8)
        np.testing.assert_allclose(s1["score_debiased"], s2["score_debiased"], atol=1e-8)
        o1 = r1.outliers.sort_values("row_id")
        o2 = r2.outliers.sort_values("row_id")
        np.testing.assert_allclose(o2["gamma"].to_numpy(), sgn * o1["gamma"].to_numpy(), atol=1e-8)
        np.testing.assert_allclose(o2["residual"].to_numpy(), sgn * o1["residual"].to_numpy(), atol=1e-8)
        assert (o1["is_outlier"].to_numpy() == o2["is_outlier"].to_numpy()).all()
        assert r1.outliers["is_outlier"].sum() > 0


def test_disconnected_graph():
    """Test 3 of docs/methods/ranking.md §8.1: c = 3, memberships {0..4}, {5..9}, {10}; 10 isolated; no global rank by default."""
    rng = np.random.default_rng(0)
    rows = []
    for block in (range(5), range(5, 10)):
        b = list(block)
        for a_ in b:
            for c_ in b:
                if a_ < c_:
                    rows.append((a_, c_, float(rng.choice([-1, 1]))))
    df = pd.DataFrame(rows, columns=["item_a", "item_b", "outcome"])
    universe = list(range(11))
    rep = check_comparison_graph(df, items=universe)
    assert rep.n_components == 3 and not rep.connected
    comp = rep.components.set_index("item")["component"]
    groups = {tuple(sorted(int(x) for x in comp.index[comp == c])) for c in comp.unique()}
    assert groups == {(0, 1, 2, 3, 4), (5, 6, 7, 8, 9), (10,)}
    assert rep.isolated_items == ["10"]
    with pytest.raises(ValueError, match="not connected"):
        fit_hodgerank(df, items=universe, allow_disconnected=False)
    with pytest.raises(ValueError, match="not connected"):
        fit_hlasso(df, items=universe, allow_disconnected=False)
    res = fit_hodgerank(df, items=universe, allow_disconnected=True)
    sums = res.ranking.groupby("component")["score"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 0.0, atol=1e-12)
    assert res.ranking.groupby("component")["rank"].min().eq(1).all()
    assert res.ranking.loc[res.ranking["item"] == "10", "n_comparisons"].item() == 0
    rob = fit_hlasso(df, items=universe, allow_disconnected=True, lambda_rule="fixed", lam=0.5)
    np.testing.assert_allclose(rob.ranking.groupby("component")["score"].sum().to_numpy(), 0.0, atol=1e-10)


def _decoded(schema):
    """``schema`` with every dictionary-encoded text field as the plain text type of the other id columns: a Parquet
    read gives a dictionary's indices back as int32 and its values as ``string``, whatever they were written as."""
    import pyarrow as pa

    fields = [f.with_type(pa.large_string()) if pa.types.is_dictionary(f.type) else f for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def test_output_tables_shape_and_parquet_roundtrip(tmp_path):
    """Test 24 of docs/methods/ranking.md §8.1 (library side): tables have the documented columns and a stable Arrow schema."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    inst = mm13_instance(1, sn=300, op=0.1)
    i, j, y = inst.graph.i, inst.graph.j, inst.graph.y
    df = comparison_table(i, j, y)
    res_a = fit_ranking(df, outliers="lbi")
    res_b = fit_ranking(df.drop(columns=["annotator"]).iloc[:200], outliers="hlasso")
    assert list(res_a.ranking.columns) == ["item", "score", "rank", "component", "n_comparisons"]
    assert list(res_a.outliers.columns)[:8] == [
        "row_id",
        "annotator",
        "item_a",
        "item_b",
        "outcome",
        "weight",
        "gamma",
        "entry_time",
    ]
    assert {"is_outlier", "path_rank", "undetectable", "residual"} <= set(res_a.outliers.columns)
    assert list(res_a.annotators.columns) == ["annotator", "n_comparisons", "n_outliers", "outlier_rate"]
    assert res_a.annotators["n_comparisons"].sum() == len(df)
    assert res_b.annotators.empty
    assert len(res_a.outliers) == len(df) and sorted(res_a.outliers["row_id"]) == list(range(len(df)))
    assert res_a.ranking["rank"].min() == 1 and res_a.ranking["rank"].max() == 16
    for name in ("ranking", "outliers", "annotators", "diagnostics"):
        schemas = []
        for res in (res_a, res_b):
            tab = pa.Table.from_pandas(getattr(res, name), preserve_index=False)
            path = tmp_path / f"{name}_{res.method}.parquet"
            pq.write_table(tab, path)
            back = pq.read_table(path)
            # missing_reason is a pandas category in memory (crowdflow.contracts.missing.reason_column): Arrow gets a
            # dictionary column (int8 codes for a few reasons), which Parquet reads back with int32 indices and
            # ``string`` values; every other field, and every value, must round-trip unchanged
            assert _decoded(back.schema).equals(_decoded(tab.schema))
            pd.testing.assert_frame_equal(back.to_pandas(), tab.to_pandas())
            schemas.append(tab.schema.remove_metadata())
        if name != "annotators":
            assert schemas[0].equals(schemas[1]), name


@pytest.mark.parametrize("algorithm", [2, 3, 4])
def test_fit_lbi_tables(algorithm):
    inst = huber_instance(2)
    g, th, truth = inst.graph, inst.theta, inst.outlier
    df = pd.DataFrame(
        {
            "annotator": np.where(truth, "spammer", np.array([f"a{k % 5}" for k in range(g.m)])),
            "item_a": g.i,
            "item_b": g.j,
            "outcome": g.y,
        }
    )
    res = fit_lbi(df, algorithm=algorithm, stop_rule="discrepancy", sigma=0.2, n_workers=2, diagnostics=algorithm == 3)
    assert res.converged and res.method == "lbi"
    out = res.outliers.sort_values("row_id")
    assert (out["is_outlier"].to_numpy() == truth).all()
    assert np.isfinite(out.loc[out.is_outlier, "entry_time"]).all()
    ann = res.annotators.set_index("annotator")
    assert ann.loc["spammer", "outlier_rate"] == 1.0 and ann.drop("spammer")["n_outliers"].sum() == 0
    sc = res.ranking.set_index("item").loc[[str(k) for k in range(30)], "score"].to_numpy()
    assert kendalltau(sc, th).statistic > 0.95
    assert {"iteration", "t", "support_size", "support_weight", "residual_norm"} <= set(res.trace.columns)
    assert set(res.path.columns) == {"checkpoint", "t", "row_id", "gamma"}
    assert res.params["stop_rule"] == "discrepancy" and res.params["kappa"] == 100.0
    d = res.diagnostics.iloc[0]
    assert d["n_outliers"] == 30
    if algorithm == 3:
        assert d["total_inconsistency"] > 0 and d["n_triangles"] > 0


def test_fit_lbi_sigma_estimated():
    inst = huber_instance(0)
    g, truth = inst.graph, inst.outlier
    df = pd.DataFrame({"item_a": g.i, "item_b": g.j, "outcome": g.y})
    r1 = fit_lbi(df, stop_rule="discrepancy", diagnostics=False)
    assert r1.params["sigma"] == pytest.approx(0.2, rel=0.15)
    assert (r1.outliers.sort_values("row_id")["is_outlier"].to_numpy() == truth).all()


def test_degenerate_inputs_give_explicit_empty_results():
    """Consistent data (no cycles) or all ties: no outliers, the path ends at once, no warnings."""
    import warnings as _w

    from crowdflow.ranking.fit import fit_hlasso

    rng = np.random.default_rng(0)
    iu, ju = np.triu_indices(6, 1)
    th = rng.standard_normal(6)
    for y in (th[iu] - th[ju], np.zeros(iu.size)):
        df = pd.DataFrame({"item_a": iu, "item_b": ju, "outcome": y})
        with _w.catch_warnings():
            _w.simplefilter("error", RuntimeWarning)
            r1 = fit_lbi(df)
            r2 = fit_hlasso(df)
        expected = th - th.mean() if np.any(y != 0) else np.zeros(6)
        for r in (r1, r2):
            assert r.converged and not r.outliers["is_outlier"].any()
            scores = r.ranking.set_index("item").loc[[str(k) for k in range(6)], "score"].to_numpy()
            np.testing.assert_allclose(scores, expected, atol=1e-10)
        assert r1.params["stop_iter"] == 0


def test_data_the_options_cannot_fit_are_degenerate_inputs():
    """Valid tables and valid options that still admit no fit raise DegenerateInput (CLI exit 2, never an
    'unexpected error'); it is a ValueError, so library callers catching ValueError keep working."""
    g = huber_instance(1).graph
    with pytest.raises(DegenerateInput, match="step too large"):  # kappa*dt < 2, but not below 2/(lambda_max+1)
        fit_lbi(comparison_table(g.i, g.j, g.y), algorithm=2, kappa=100.0, dt=0.015)
