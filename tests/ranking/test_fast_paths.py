"""The compiled build and diagnostics of the ranking job equal their references over a generated family (#19).

* id encoding (crowdflow.ranking.encoding) against "str of every value, then factorize";
* the graph build from a table against the canonical-text reference build;
* distinct pairs / Laplacian / grounding (crowdflow.ranking.pairs) against the sort-based and scipy references;
* bridges, triangles, CGLS curl projection and the row parts (crowdflow.ranking.hodge_kernels) against
  the numpy references in crowdflow.ranking.hodge.

The family: 1-3,000 rows, 2-3,000 items, ties (outcome 0), Zipf-skewed popularity, repeated pairs, weights,
several components, paths (bridges everywhere), a single comparison.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import scipy.sparse as sp

from crowdflow.contracts.errors import DegenerateInput
from crowdflow.ranking import ComparisonGraph, build_comparison_graph, fit_hodgerank, hodge
from crowdflow.ranking.encoding import encode_ids, encode_pair_ids
from crowdflow.ranking.graph import _build_comparison_graph_reference, _laplacian_from_edges, _unique_edges
from crowdflow.ranking.hodge_kernels import cgls_curl, laplacian_bridges, row_parts, triangles
from crowdflow.ranking.pairs import drop_nodes, laplacian_csr, pair_table


def _pairs(rng: np.random.Generator, n: int, m: int, shape: str) -> tuple[np.ndarray, np.ndarray]:
    if shape == "zipf":
        p = 1.0 / np.arange(1, n + 1) ** 1.2
        p /= p.sum()
        i, j = rng.choice(n, m, p=p), rng.choice(n, m, p=p)
        return i, np.where(i == j, (i + 1) % n, j)
    if shape == "path":
        i = rng.integers(0, n - 1, m)
        return i, i + 1
    if shape == "two":  # two components
        half = max(n // 2, 2)
        i = rng.integers(0, half, m)
        j = (i + 1 + rng.integers(0, half - 1, m)) % half
        flip = rng.random(m) < 0.5
        return np.where(flip, i + half, i) % n, np.where(flip, j + half, j) % n
    i = rng.integers(0, n, m)
    return i, (i + 1 + rng.integers(0, n - 1, m)) % n


def _family() -> list[tuple[int, int, str, int]]:
    rng = np.random.default_rng(19)
    shapes = ["uniform", "zipf", "path", "two"]
    out = [(2, 1, "uniform", 0), (3, 2, "path", 1)]
    for k in range(22):
        n = int(rng.choice([4, 30, 300, 3000]))
        m = int(rng.choice([1, 50, 800, 3000]))
        out.append((n, m, shapes[k % 4], k + 2))
    return out


FAMILY = _family()


def _by_definition(s: pd.Series) -> np.ndarray:
    return s.astype(str).to_numpy(dtype=object)


ID_COLUMNS = {
    "arrow": pd.Series(["b", "a", "ccc", "a", "", "é✓", "b"], dtype="string[pyarrow]"),
    "arrow_long": pd.Series(
        ["a-very-long-identifier-0001", "a-very-long-identifier-0002", "a-very-long-identifier-0001", "a-very-long"],
        dtype="string[pyarrow]",
    ),
    "arrow_nul": pd.Series(["a\x00", "a", "a\x00", "\x00"], dtype="string[pyarrow]"),
    "arrow_chunks": pd.Series(
        pd.arrays.ArrowExtensionArray(pa.chunked_array([pa.array(["x", "y", "z"]).slice(1), pa.array(["y", "w"])]))
    ),
    "large_string": pd.Series(
        pd.arrays.ArrowExtensionArray(pa.chunked_array([pa.array(["p", "q", "p"], type=pa.large_string())]))
    ),
    "object_mixed": pd.Series(["7", 7, 7.5, "x", 7], dtype=object),
    "int": pd.Series([10, 3, 10, 2]),
    "float": pd.Series([1.0, 2.5, 1.0]),
    "bool": pd.Series([True, False, True]),
}


@pytest.mark.parametrize("name", sorted(ID_COLUMNS))
def test_encode_ids_equal_str_of_every_value(name: str) -> None:
    s = ID_COLUMNS[name]
    codes, text = encode_ids(s)
    assert len(set(text.tolist())) == text.size
    assert all(type(t) is str for t in text)
    np.testing.assert_array_equal(text[codes], _by_definition(s))


def test_encode_many_distinct_strings_grows_the_table() -> None:
    """More distinct ids than the first table and dictionary hold (rehash and growth), long and short ids."""
    rng = np.random.default_rng(0)
    k = rng.integers(0, 20_000, 60_000)
    ids = np.array([f"{'long-prefix-' * (q % 3)}{q}" for q in range(20_000)], dtype=object)
    a = pd.Series(ids[k], dtype="string[pyarrow]")
    b = pd.Series(ids[rng.permutation(k)], dtype="string[pyarrow]")
    ca, cb, text = encode_pair_ids(a, b)
    assert len(set(text.tolist())) == text.size == np.unique(k).size
    np.testing.assert_array_equal(text[ca], _by_definition(a))
    np.testing.assert_array_equal(text[cb], _by_definition(b))


def test_encode_pair_ids_of_mixed_kinds_share_one_numbering() -> None:
    a = pd.Series([1, 2, 3, None], dtype=object)
    b = pd.Series(["2", "3", "1", "4"], dtype="string[pyarrow]")
    ca, cb, text = encode_pair_ids(a, b)
    assert ca[3] == -1
    np.testing.assert_array_equal(text[ca[:3]], ["1", "2", "3"])
    np.testing.assert_array_equal(text[cb], ["2", "3", "1", "4"])
    assert len(set(text.tolist())) == text.size == 4


def _table(rng: np.random.Generator, n: int, m: int, shape: str, kind: str) -> pd.DataFrame:
    i, j = _pairs(rng, n, m, shape)
    names = np.array([f"it{q:05d}" for q in range(n)], dtype=object)
    if kind == "int":
        ca, cb = pd.Series(i * 3 + 1), pd.Series(j * 3 + 1)
    elif kind == "object":
        ca, cb = pd.Series(names[i], dtype=object), pd.Series(names[j], dtype=object)
    else:
        ca, cb = pd.Series(names[i], dtype="string[pyarrow]"), pd.Series(names[j], dtype="string[pyarrow]")
    y = rng.choice([-1.0, 0.0, 1.0], m)  # ties included
    df = pd.DataFrame({"item_a": ca, "item_b": cb, "outcome": y, "weight": rng.choice([0.5, 1.0, 3.0], m)})
    if m > 1:
        df["annotator"] = pd.Series(rng.integers(0, 5, m).astype(str), dtype=object).where(rng.random(m) > 0.1)
    return df


def _assert_same_graph(g: ComparisonGraph, r: ComparisonGraph) -> None:
    for f in ("items", "i", "j", "y", "w", "component", "edge", "edge_sign", "edge_u", "edge_v", "row_id"):
        np.testing.assert_array_equal(getattr(g, f), getattr(r, f), err_msg=f)
    np.testing.assert_allclose(g.edge_weight, r.edge_weight, rtol=1e-13)
    assert g.n_components == r.n_components
    assert list(g.annotator) == list(r.annotator)
    assert (g.L != r.L).nnz == 0 or np.allclose(g.L.toarray(), r.L.toarray(), rtol=1e-13)


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_graph_build_equals_reference(n: int, m: int, shape: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kind = ["arrow", "object", "int"][seed % 3]
    df = _table(rng, n, m, shape, kind)
    items = None if seed % 4 else [*df["item_a"].astype(str).unique(), "never-compared"]
    _assert_same_graph(build_comparison_graph(df, items=items), _build_comparison_graph_reference(df, items=items))


@pytest.mark.parametrize("kind", ["arrow", "object", "int"])
def test_bad_ids_give_the_reference_errors(kind: str) -> None:
    rng = np.random.default_rng(3)
    df = _table(rng, 6, 20, "uniform", kind)
    same = df.copy()
    same.loc[4, "item_b"] = same.loc[4, "item_a"]
    missing = df.copy()
    missing["item_b"] = missing["item_b"].astype(object)
    missing.loc[2, "item_b"] = None
    for bad in (same, missing):
        with pytest.raises(ValueError) as ref:
            _build_comparison_graph_reference(bad)
        with pytest.raises(ValueError, match=re.escape(str(ref.value))):
            build_comparison_graph(bad)


def test_disconnected_graph_is_refused_before_the_fit() -> None:
    rng = np.random.default_rng(5)
    df = _table(rng, 40, 300, "two", "arrow")
    with pytest.raises(DegenerateInput, match="not connected"):
        fit_hodgerank(df, allow_disconnected=False)


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_pairs_and_laplacian_equal_reference(n: int, m: int, shape: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    i, j = _pairs(rng, n, m, shape)
    w = np.ones(m) if seed % 2 else rng.uniform(0.1, 3.0, m)
    ref = _unique_edges(np.minimum(i, j), np.maximum(i, j), w, n)
    got = pair_table(i, j, w, n)
    for a, b in zip(ref[:3], got[:3], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(got[3], ref[3], rtol=1e-13)
    deg = np.bincount(i, weights=w, minlength=n) + np.bincount(j, weights=w, minlength=n)
    L_ref = _laplacian_from_edges(*ref[1:], deg, n)
    L = laplacian_csr(*got[1:], deg, n)
    np.testing.assert_array_equal(L.indptr, L_ref.indptr)
    np.testing.assert_array_equal(L.indices, L_ref.indices)
    assert L.indices.dtype == L_ref.indices.dtype
    np.testing.assert_allclose(L.data, L_ref.data, rtol=1e-13)
    keep = np.sort(rng.choice(n, max(n - 3, 1), replace=False))
    assert (drop_nodes(L_ref, keep) != L_ref[keep][:, keep]).nnz == 0


def test_sparse_pair_path_equals_dense_path() -> None:
    """The bucketed path (many items) and the dense table (few items) number the same pairs the same way."""
    from crowdflow.ranking import pairs

    rng = np.random.default_rng(11)
    i, j = _pairs(rng, 50, 2000, "zipf")
    w = rng.uniform(0.5, 2.0, 2000)
    dense = pairs.pair_table(i, j, w, 50)
    sparse = pairs._bucket_pairs(i, j, w, 50)
    for a, b in zip(dense, sparse, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_hodge_kernels_equal_reference(n: int, m: int, shape: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    i, j = _pairs(rng, n, m, shape)
    g = ComparisonGraph.from_arrays(i, j, rng.choice([-1.0, 0.0, 1.0, 2.5], m), rng.uniform(0.5, 2.0, m), n=n)
    np.testing.assert_array_equal(laplacian_bridges(g.L, g.n_edges), hodge._bridges(g))
    ref = hodge._enumerate_triangles_reference(g)
    assert ref is not None
    tri, tri_e = triangles(g.n, g.edge_u, g.edge_v)
    np.testing.assert_array_equal(tri, ref[0])
    np.testing.assert_array_equal(tri_e, ref[1])
    T, E = tri_e.shape[0], g.n_edges
    b = rng.standard_normal(E)
    if T:
        sw = np.sqrt(g.edge_weight)
        d1 = sp.csr_matrix((np.tile([1.0, 1.0, -1.0], T), tri_e.ravel(), np.arange(0, 3 * T + 1, 3)), shape=(T, E))
        A = sp.csr_matrix(sp.diags(1.0 / sw) @ d1.T)
        want = hodge._cgls_projection(A, b, rtol=1e-13, maxiter=10_000)
        got, ok = cgls_curl(tri_e, g.edge_weight, b, rtol=1e-13, maxiter=10_000)
        assert ok
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())
    theta = rng.standard_normal(n)
    grad = g.gradient(theta)
    ybar, ce, he = rng.standard_normal((3, E))
    comp = g.component[g.i]
    r, bic, curl, harm, sums = row_parts(g.y, g.w, g.edge_sign, g.edge, grad, ybar, ce, he, comp, g.n_components)
    s = g.edge_sign
    parts = [g.y, g.y - grad, g.y - s * ybar[g.edge], s * ce[g.edge], s * he[g.edge]]
    for got_v, want_v in zip([r, bic, curl, harm], parts[1:], strict=True):
        np.testing.assert_array_equal(got_v, want_v)
    for col, v in enumerate(parts):
        want_s = np.bincount(comp, weights=g.w * v * v, minlength=g.n_components)
        np.testing.assert_allclose(sums[:, col], want_s, rtol=1e-12)
    np.testing.assert_allclose(sums[:, 5], np.bincount(comp, weights=g.w, minlength=g.n_components), rtol=1e-12)


def test_fiedler_value_of_a_large_component_equals_dense() -> None:
    """The LOBPCG branch of large components gives the dense one-eigenvalue answer to 1e-8 relative."""
    rng = np.random.default_rng(2)
    for shape in ("uniform", "zipf"):
        i, j = _pairs(rng, 600, 6000, shape)
        g = ComparisonGraph.from_arrays(i, j, rng.standard_normal(6000), n=600)
        dense = hodge._fiedler_values(g)
        sparse = hodge._fiedler_values(g, dense_max_n=100)
        np.testing.assert_allclose(sparse, dense, rtol=1e-8)


# --- issue #19, round 4: radix pairs, bridges on the Laplacian, row passes, integer spans ----------------------------


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_radix_and_bucket_pairs_equal_reference(n: int, m: int, shape: str, seed: int) -> None:
    """The radix-sorted pairs (many items) and the bucketed fallback equal the sort-based reference, unit weights
    (counted) or not, duplicate pairs included."""
    from crowdflow.ranking import pairs

    rng = np.random.default_rng(seed)
    i, j = _pairs(rng, n, m, shape)
    if m > 3:  # repeat some rows verbatim and reversed: duplicate pairs in both orientations
        k = rng.integers(0, m, m // 3)
        i, j = np.r_[i, i[k], j[k]], np.r_[j, j[k], i[k]]
    for w in (np.ones(i.size), rng.uniform(0.1, 3.0, i.size)):
        ref = _unique_edges(np.minimum(i, j), np.maximum(i, j), w, n)
        unit = bool(np.all(w == 1.0))
        radix, bucket = pairs._radix_pairs(i, j, w, n, unit), pairs._bucket_pairs(i, j, w, n)
        for got in (radix, bucket):
            for a, b in zip(ref[:3], got[:3], strict=True):
                np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(got[3], ref[3], rtol=1e-13)  # reduceat sums pairwise
        np.testing.assert_array_equal(radix[3], bucket[3])  # both sum in row order


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_laplacian_bridges_equal_reference_bridges(n: int, m: int, shape: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    i, j = _pairs(rng, n, m, shape)
    g = ComparisonGraph.from_arrays(i, j, rng.standard_normal(m), rng.uniform(0.5, 2.0, m), n=n)
    np.testing.assert_array_equal(laplacian_bridges(g.L, g.n_edges), hodge._bridges(g))


@pytest.mark.parametrize(("n", "m", "shape", "seed"), FAMILY)
def test_row_passes_equal_numpy(n: int, m: int, shape: str, seed: int) -> None:
    """Row checks, orientation, degrees, divergence and fitted values: bit-identical to the numpy expressions."""
    from crowdflow.ranking.rows import divergence, fitted_and_residual, row_summary

    rng = np.random.default_rng(seed)
    i, j = _pairs(rng, n, m, shape)
    i, j = i.astype(np.int64), j.astype(np.int64)
    y = rng.choice([-1.0, 0.0, 1.0, 0.37], m)
    w = rng.uniform(0.1, 3.0, m)
    ok, sign, deg = row_summary(i, j, y, w, n)
    assert ok
    np.testing.assert_array_equal(sign, np.where(i < j, 1.0, -1.0))
    np.testing.assert_array_equal(deg, np.bincount(i, weights=w, minlength=n) + np.bincount(j, weights=w, minlength=n))
    v = rng.standard_normal(m)
    wv = w * v
    want = np.bincount(i, weights=wv, minlength=n) - np.bincount(j, weights=wv, minlength=n)
    np.testing.assert_array_equal(divergence(i, j, w, v, n), want)
    theta = rng.standard_normal(n)
    fitted, res = fitted_and_residual(theta, i, j, y)
    np.testing.assert_array_equal(fitted, theta[i] - theta[j])
    np.testing.assert_array_equal(res, y - (theta[i] - theta[j]))
    for bad in ("y", "w", "range", "self"):
        yb, wb, jb = y.copy(), w.copy(), j.copy()
        if bad == "y":
            yb[-1] = np.nan
        elif bad == "w":
            wb[-1] = 0.0
        elif bad == "range":
            jb[-1] = n
        else:
            jb[-1] = i[-1]
        assert not row_summary(i, jb, yb, wb, n)[0]
        with pytest.raises(ValueError):
            ComparisonGraph.from_arrays(i, jb, yb, wb, n=n)


INT_COLUMNS = {
    "small": (np.array([5, 3, 5, 9]), np.array([3, 4, 4, 5])),
    "negative": (np.array([-5, -1, 7, -5]), np.array([0, -1, 2, 3])),
    "uint8": (np.array([0, 255, 7], dtype=np.uint8), np.array([1, 2, 3], dtype=np.uint8)),
    "mixed_widths": (np.array([1, 2, 300], dtype=np.int16), np.array([7, -1, 2], dtype=np.int64)),
    "wide_span": (np.array([0, 2**40, 5]), np.array([2**40, 1, 0])),  # falls back to hashing
    "int64_extremes": (np.array([-(2**63), 2**63 - 1]), np.array([0, 1])),
    "uint64_high": (
        np.array([2**64 - 1, 2**64 - 3], dtype=np.uint64),
        np.array([2**64 - 2, 2**64 - 1], dtype=np.uint64),
    ),
}


@pytest.mark.parametrize("name", sorted(INT_COLUMNS))
def test_integer_span_encoding_equals_str_of_every_value(name: str) -> None:
    a, b = (pd.Series(x) for x in INT_COLUMNS[name])
    ca, cb, text = encode_pair_ids(a, b)
    assert len(set(text.tolist())) == text.size
    assert all(type(t) is str for t in text)
    np.testing.assert_array_equal(text[ca], _by_definition(a))
    np.testing.assert_array_equal(text[cb], _by_definition(b))


def _tables_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_exact=False, rtol=1e-12)


@pytest.mark.parametrize(("n", "m", "shape", "seed"), [f for f in FAMILY if f[1] > 1])
def test_fit_from_table_equals_fit_from_reference_graph(n: int, m: int, shape: str, seed: int) -> None:
    """The scores-only fit of a table (fast encodings, row passes, no copies) equals the fit of the reference graph
    (canonical text, numpy checks), the output tables included; with and without annotators."""
    rng = np.random.default_rng(seed)
    kind = ["arrow", "object", "int"][seed % 3]
    df = _table(rng, n, m, shape, kind)
    if seed % 2:
        df = df.drop(columns=["annotator"], errors="ignore")
    got = fit_hodgerank(df, diagnostics=False)
    ref = fit_hodgerank(_build_comparison_graph_reference(df), diagnostics=False)
    _tables_equal(got.ranking, ref.ranking)
    _tables_equal(got.residuals, ref.residuals)
    assert got.residuals["item_a"].tolist() == df["item_a"].astype(str).tolist()
    if "annotator" not in df.columns:
        assert got.residuals["annotator"].isna().all()
    before = df.copy()
    got.residuals.loc[0, "outcome"] = 99.0  # the table owns its columns: the input is untouched
    pd.testing.assert_frame_equal(df, before)


def test_is_range() -> None:
    from crowdflow.ranking.rows import is_range

    assert is_range(np.arange(5, dtype=np.int64)) and is_range(np.zeros(0, dtype=np.int64))
    assert not is_range(np.array([0, 2, 1], dtype=np.int64)) and not is_range(np.array([1], dtype=np.int64))


@pytest.mark.parametrize("kind", ["ascii", "unicode", "numeric_text"])
def test_ranking_order_equals_pandas_sort(kind: str) -> None:
    """The ranking table's row order (Arrow text order + lexsort) equals pandas' sort on (component, rank, item)."""
    from crowdflow.ranking.tables import _ranking_order

    rng = np.random.default_rng(7)
    pool = {
        "ascii": [f"it{k}" for k in range(300)] + ["", "A", "a", "Z_"],
        "unicode": ["é", "e", "✓", "Ω", "ω", "z", "", "日本", "\x00", "a\x00", "𝔘"] + [f"x{k}" for k in range(50)],
        "numeric_text": [str(k) for k in range(200)] + ["10.0", "-1"],
    }[kind]
    items = np.array(pool, dtype=object)
    component = rng.integers(0, 3, items.size)
    rank = rng.integers(1, 4, items.size)  # many ties on (component, rank): the items decide
    frame = pd.DataFrame({"component": component, "rank": rank, "item": pd.Series(items, dtype=object)})
    want = frame.sort_values(["component", "rank", "item"], kind="stable").index.to_numpy()
    np.testing.assert_array_equal(_ranking_order(items, component, rank), want)
