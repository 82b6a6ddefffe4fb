"""The ±1 law rule over generated families: clean data of every generating law, and planted reversals.

(docs/methods/ranking.md §3.4.2, crowdflow issue #35 item 4.) The presence step of
:func:`crowdflow.ranking.laws.law_flags` is the held-out calibration test
(:func:`crowdflow.ranking.laws.heldout_reversal_test`). Clean draws of each of the generator's ±1 laws
(Bradley–Terry, Thurstone, Thurstone with ties; sparse and dense, three designs) must have at most 1 % of
their rows flagged; on small planted draws (10 % reversals among pairs ≥ 5σ apart) recall and precision
must be within 0.05 of the oracle's (true scores, true law, same cut), both capped at 0.9 (the issue's
target). The reference is the truth of the draw and the oracle's p-values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crowdflow.ranking import undetectable_rows
from crowdflow.ranking.laws import bh_reject, heldout_reversal_test, law_flags, reversal_lr
from crowdflow.synth.ranking import PlantedSpec, oracle_pvalues, planted_instance

LAWS: list[dict[str, Any]] = [
    {"outcome": "pm1_btl"},
    {"outcome": "pm1_thurstone", "tie_width": 0.0},
    {"outcome": "pm1_thurstone", "tie_width": 0.25},
]
SHAPES: list[dict[str, Any]] = [
    {"n": 200, "rows_per_item": 8, "design": "band", "sigma": 1.0},
    {"n": 100, "rows_per_item": 20, "design": "zipf", "n_components": 3, "sigma": 0.3},
    {"n": 300, "rows_per_item": 8, "design": "uniform", "sigma": 0.1},
]


@pytest.mark.parametrize("shape", SHAPES, ids=["sparse-band-noisy", "dense-zipf-3pieces", "sparse-uniform-sharp"])
@pytest.mark.parametrize("law", LAWS, ids=["btl", "thurstone", "ties"])
def test_clean_family_flags_at_most_one_percent(law: dict[str, Any], shape: dict[str, Any]) -> None:
    """Clean draws of every ±1 law of the generator, sparse and dense: ≤ 1 % of the rows flagged (measured: 0)."""
    g = planted_instance(PlantedSpec(**law, **shape, frac=0.0), 7).graph
    assert law_flags(g).flags.mean() <= 0.01


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("law", LAWS, ids=["btl", "thurstone", "ties"])
def test_planted_reversals_meet_the_oracle_target(law: dict[str, Any], seed: int) -> None:
    """100 items, 30 rows an item, σ = 0.2, 10 % of the rows reversed among pairs ≥ 5σ apart: recall and precision
    within 0.05 of the oracle's, capped at 0.9 (measured: recall 0.89–0.99, precision 0.89–1.0; oracle 1.0 / ≥ 0.98).
    """
    inst = planted_instance(PlantedSpec(n=100, rows_per_item=30, sigma=0.2, frac=0.1, outlier_gap=5.0, **law), seed)
    g = inst.graph
    truth = inst.outlier & ~undetectable_rows(g)
    assert truth.sum() >= 100
    rule, oracle = law_flags(g).flags, bh_reject(oracle_pvalues(inst), g.w)

    def rec_prec(f: np.ndarray) -> tuple[float, float]:
        tp = float((f & truth).sum())
        return tp / float(truth.sum()), tp / max(float(f.sum()), 1.0)

    (r_rule, p_rule), (r_or, p_or) = rec_prec(rule), rec_prec(oracle)
    assert min(r_rule, 0.9) >= min(r_or, 0.9) - 0.05, (r_rule, r_or)
    assert min(p_rule, 0.9) >= min(p_or, 0.9) - 0.05, (p_rule, p_or)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heldout_test_accepts_sparse_clean_and_rejects_reversals(seed: int) -> None:
    """Clean BTL, 200 items, 8 rows an item, band, σ = 1 (the mixture alone flags 6–9 % of such rows): p > 0.01
    (measured 0.04–0.27); the issue's reversals on 100 items: p < 10⁻⁶ (measured LR > 100)."""
    clean = planted_instance(
        PlantedSpec(n=200, rows_per_item=8, design="band", sigma=1.0, outcome="pm1_btl", frac=0.0), seed
    ).graph
    assert heldout_reversal_test(clean, law="binary", link="logit").p > 0.01
    spec = PlantedSpec(n=100, rows_per_item=30, outcome="pm1_btl", sigma=0.2, frac=0.1, outlier_gap=5.0)
    rev = planted_instance(spec, seed).graph
    t = heldout_reversal_test(rev, law="binary", link="logit")
    assert t.p < 1e-6 and 0.05 < t.eps < 0.45, (t.p, t.eps)


@pytest.mark.slow  # 1,000 items, 4,000 rows (~6 s on 2 cores)
def test_clean_ties_draw_is_not_read_as_reversals() -> None:
    """The benchmark's clean Thurstone-with-ties draw (1,000 items, 8 rows an item, band, 3 pieces, σ = 1) that the
    bootstrap presence test flagged (17.8 % of its rows): the in-sample likelihood ratio of a reversal share is
    > 500 nats (measured 1,077), the held-out test does not reject, and nothing is flagged."""
    spec = PlantedSpec(
        n=1000,
        rows_per_item=8,
        design="band",
        n_components=3,
        sigma=1.0,
        outcome="pm1_thurstone",
        tie_width=0.25,
        frac=0.1,
        outlier_gap=5.0,
    )
    inst = planted_instance(spec, 40001)
    g = inst.graph
    assert not inst.outlier.any() and (g.y == 0).any()
    t_in, _, _ = reversal_lr(g, law="ties", link="logit")
    assert t_in > 500
    assert heldout_reversal_test(g, law="ties", link="logit").p > 0.01
    assert not law_flags(g).flags.any()
