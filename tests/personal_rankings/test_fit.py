"""The entry point fit_personal_rankings: recovery of the synthetic truth, the result tables, warnings,
bad arguments (docs/methods/personal_rankings.md §6.2).

Default run: convergence and accuracy on small synthetic problems. ``slow``: the spec's K=200 accuracy
tests, λ=0 ablation, K=800 scale smoke test.

Property test (issue #9, item 2d; hypothesis): on tiny random comparison tables the fit returns finite
scores, or a ValueError that says why, exactly when nothing is left to fit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crowdflow.personal_rankings import PersonalComparisons, fit_personal_rankings, mean_kendall_tau, relative_error
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons


def test_rtr_convergence_and_accuracy_K50(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    errs = []
    for seed in (1, 2, 3):
        enc, Xs = encoded(50, 3, 5, seed)
        res = fit_personal_rankings(enc, rank=3, method="rtr")
        d = res.diagnostics
        assert d.converged and d.grad_norm < 1e-6 and d.iterations <= 100
        tr = res.trace
        assert tr["objective"].is_monotonic_decreasing and tr["grad_norm"].iloc[-1] == pytest.approx(d.grad_norm)
        errs.append(relative_error(res.score_matrix(), Xs))
    assert np.mean(errs) <= 0.35


def test_error_falls_as_d_grows(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    mean_err = {}
    for d in (2, 5, 12):
        errs = []
        for seed in (1, 2):
            enc, Xs = encoded(100, 5, d, seed)
            res = fit_personal_rankings(enc, rank=5)
            errs.append(relative_error(res.score_matrix(), Xs))
        mean_err[d] = float(np.mean(errs))
    assert mean_err[2] > mean_err[5] > mean_err[12]
    assert mean_err[12] < 0.6 * mean_err[2]


def test_result_tables() -> None:
    syn = synthetic_personal_comparisons(20, 2, 6, seed=5, n_items=12)
    res = fit_personal_rankings(syn.comparisons, rank=2)
    pr = res.personal_rankings
    assert list(pr.columns) == ["user", "item", "score", "rank"]
    assert len(pr) == 20 * 12 and not pr.duplicated(["user", "item"]).any()
    assert pr.groupby("user")["rank"].apply(lambda s: sorted(s) == list(range(1, 13))).all()
    assert pr["score"].abs().max() == pytest.approx(1.0)
    best = pr.loc[pr["rank"] == 1].set_index("user")["item"]
    top = pr.loc[pr.groupby("user")["score"].idxmax()].set_index("user")["item"]
    pd.testing.assert_series_equal(best.sort_index(), top.sort_index(), check_names=False)
    assert list(res.user_factors.columns) == ["user", "f0", "f1"] and len(res.user_factors) == 20
    assert list(res.item_factors.columns) == ["item", "f0", "f1"] and len(res.item_factors) == 12
    X = res.user_factors[["f0", "f1"]].to_numpy() @ res.item_factors[["f0", "f1"]].to_numpy().T
    np.testing.assert_allclose(X / res.diagnostics.scale, pr["score"].to_numpy().reshape(20, 12), atol=1e-12)
    meta = res.diagnostics_table()
    assert len(meta) == 1 and {
        "method",
        "rank",
        "lambda_",
        "sigma",
        "n_comparisons",
        "iterations",
        "grad_norm",
        "stop_reason",
        "converged",
    } <= set(meta.columns)
    assert res.excluded.empty and res.rank_selection is None
    # predict_proba on the training rows beats chance, NaN for unknown ids
    prob = res.predict_proba(syn.comparisons)
    acc = np.mean((prob > 0.5) == (syn.comparisons["outcome"].to_numpy() > 0))
    assert acc > 0.7
    unknown = res.predict_proba(pd.DataFrame({"annotator": ["zz"], "item_a": ["i00"], "item_b": ["i01"]}))
    assert np.isnan(unknown).all()


def test_not_converged_warns(encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]]) -> None:
    enc, _ = encoded(30, 3, 5, 1)
    for method in ("lbfgs", "rtr"):
        with pytest.warns(RuntimeWarning, match="did not converge"):
            res = fit_personal_rankings(enc, rank=3, method=method, max_iter=2)
        assert not res.diagnostics.converged and res.diagnostics.iterations == 2


def test_bad_arguments(encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]]) -> None:
    enc, _ = encoded(10, 2, 5, 1)
    with pytest.raises(ValueError, match="rank"):
        fit_personal_rankings(enc, rank=11)
    with pytest.raises(ValueError, match="method"):
        fit_personal_rankings(enc, rank=2, method="sgd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sigma"):
        fit_personal_rankings(enc, rank=2, sigma=0.0)


@pytest.mark.slow
def test_spec_K200_accuracy_and_monotone_in_d(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    means = {}
    taus = {}
    for d in (2, 3, 5, 10):
        errs, tt = [], []
        for seed in (1, 2, 3):
            enc, Xs = encoded(200, 10, d, seed)
            Xh = fit_personal_rankings(enc, rank=10).score_matrix()
            errs.append(relative_error(Xh, Xs))
            tt.append(mean_kendall_tau(Xh, Xs))
        means[d], taus[d] = float(np.mean(errs)), float(np.mean(tt))
    assert means[5] <= 0.25 and taus[5] >= 0.70  # docs/methods/personal_rankings.md §6.2, item 2
    assert means[10] <= 0.12  # docs/methods/personal_rankings.md §6.2, item 3
    assert means[2] > means[3] > means[5] > means[10]  # docs/methods/personal_rankings.md §6.2, item 4


@pytest.mark.slow
def test_spec_flat_in_K(encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]]) -> None:
    e100 = np.mean(
        [
            relative_error(fit_personal_rankings(e, rank=10).score_matrix(), X)
            for e, X in (encoded(100, 10, 5, s) for s in (1, 2, 3))
        ]
    )
    e400 = np.mean(
        [
            relative_error(fit_personal_rankings(e, rank=10).score_matrix(), X)
            for e, X in (encoded(400, 10, 5, s) for s in (1, 2, 3))
        ]
    )
    assert e400 <= 1.3 * e100  # docs/methods/personal_rankings.md §6.2, item 5


@pytest.mark.slow
def test_spec_regularizer_matters(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    with_lam, without = [], []
    for seed in (1, 2, 3):
        enc, Xs = encoded(200, 10, 5, seed)
        with_lam.append(relative_error(fit_personal_rankings(enc, rank=10).score_matrix(), Xs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            without.append(relative_error(fit_personal_rankings(enc, rank=10, lambda_=0.0).score_matrix(), Xs))
    assert np.mean(without) > np.mean(with_lam)  # docs/methods/personal_rankings.md §6.2, item 7


@pytest.mark.slow
def test_spec_scale_smoke_K800(
    encoded: Callable[[int, int, float, int], tuple[PersonalComparisons, np.ndarray]],
) -> None:
    enc, Xs = encoded(800, 10, 5, 1)
    res = fit_personal_rankings(enc, rank=10)
    assert res.diagnostics.converged
    assert relative_error(res.score_matrix(), Xs) <= 0.25  # docs/methods/personal_rankings.md §6.2, item 9


# ---------------------------------------------------------------------------------------------------
# property test on random comparison tables
# ---------------------------------------------------------------------------------------------------


@st.composite
def comparison_tables(draw: st.DrawFn, max_items: int = 8, max_rows: int = 20) -> pd.DataFrame:
    n_items = draw(st.integers(2, max_items))
    n_rows = draw(st.integers(1, max_rows))
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, n_items - 1), st.integers(0, n_items - 1)).filter(lambda p: p[0] != p[1]),
            min_size=n_rows,
            max_size=n_rows,
        )
    )
    outcome = st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.floats(-3, 3, allow_nan=False))
    y = draw(st.lists(outcome, min_size=n_rows, max_size=n_rows))
    if draw(st.booleans()):  # all-equal comparisons: every row says the same
        y = [y[0]] * n_rows
    annot = draw(st.lists(st.integers(0, 3), min_size=n_rows, max_size=n_rows))
    return pd.DataFrame(
        {
            "annotator": [f"u{a}" for a in annot],
            "item_a": [f"i{a:02d}" for a, _ in pairs],
            "item_b": [f"i{b:02d}" for _, b in pairs],
            "outcome": y,
        }
    )


@settings(max_examples=20)
@given(df=comparison_tables(max_items=5, max_rows=12), rank=st.sampled_from([1, 2]))
def test_personal_rankings_finite(df: pd.DataFrame, rank: int) -> None:
    try:
        res = fit_personal_rankings(df, rank=rank, max_iter=50, seed=0, on_invalid="drop")
    except ValueError as exc:  # documented refusals (e.g. every row a tie): a reason, never a numpy error
        reason = str(exc)
    else:
        reason = ""
    # a refusal exactly when nothing is left to fit: no row with a winner (all ties), or a rank above
    # min(users, items) of the rows that have one
    used = df["outcome"].to_numpy() != 0
    n_users = df.loc[used, "annotator"].nunique()
    n_items = pd.unique(np.r_[df.loc[used, "item_a"].to_numpy(), df.loc[used, "item_b"].to_numpy()]).size
    assert bool(reason) == (not used.any() or rank > min(n_users, n_items)), (reason, n_users, n_items, rank)
    if reason:
        assert any(w in reason for w in ("comparison", "tie", "rank must be between")), reason
        return
    pr = res.personal_rankings
    assert np.isfinite(pr["score"]).all()
    assert np.isfinite(res.L).all() and np.isfinite(res.R).all()
    assert np.isfinite(res.diagnostics.objective)
    assert (pr.groupby("user")["rank"].min() == 1).all()
