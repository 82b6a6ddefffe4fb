"""Tests for crowdflow.ranking.cv: random-projection cross-validation of λ (docs/methods/ranking.md §3.4.7)."""

from __future__ import annotations

import pytest

from crowdflow.ranking.cv import cv_lambda
from crowdflow.ranking.fit import fit_hlasso
from crowdflow.ranking.hlasso import hlasso, hlasso_path
from crowdflow.synth.ranking import comparison_table, huber_instance


def test_cv_lambda_recovers_gross_outliers():
    """docs/methods/ranking.md §3.4.7: random-projection CV picks a λ between noise and the ±4 shifts."""
    inst = huber_instance(0)
    g, truth = inst.graph, inst.outlier
    path = hlasso_path(g, n_lambdas=40)
    lam, table = cv_lambda(g, path.lambdas, folds=5, seed=0)
    f = hlasso(g, lam)
    assert (f.support & truth).sum() == truth.sum()
    assert (f.support & ~truth).sum() <= 3
    assert list(table.columns) == ["lambda", "cv_error", "cv_se"]
    res = fit_hlasso(comparison_table(g.i, g.j, g.y), lambda_rule="cv", n_lambdas=40, diagnostics=False)
    assert res.outliers["is_outlier"].sum() == pytest.approx(30, abs=3)
