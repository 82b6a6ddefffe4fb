"""The ±1 law rule on sparse designs (8 rows an item): what it must not do, and where its recall is lost.

(docs/methods/ranking.md §3.4.2 and §8.6, crowdflow issue #35 item 4; the measurement is
``python -m benchmarks.ranking_outliers_sparse``, benchmarks/results/ranking_outliers_sparse.md.) The design:
300 items, 8 rows an item, uniform pairs, σ = 0.1, 10 % of the rows reversed among pairs ≥ 5σ apart, for each
±1 law of the generator. The reference is the draw's truth and the oracle (true scores, true law, same cut).

* Clean sparse draws: nothing flagged (every law, three seeds).
* Draws with reversals: at most 1 % of the clean rows flagged (measured ≤ 0.8 %).
* The information is in the clean rows: with the reversal set known, the law fitted to the other rows at
  ridge 10⁻⁴ finds 0.83–0.95 of the reversals at precision 1.0 (oracle 1.0 / ≥ 0.98).
* The open target, as a strict expected failure: the rule's recall within 0.05 of the oracle's (capped at
  0.9). Measured 0–0.31 against 1.0: the reversal mixture's penalised likelihood prefers a configuration that
  explains the reversals by moving items over the one near the truth, and neither removing the ridge's pull
  nor the row's self-influence recovers it. On the BTL draw it checks, no data-only rule is expected to meet
  it: the Bayes detector under the generator's own prior, law and rates (crowdflow.synth.ranking_posterior,
  two HMC runs from θ = 0 and from the truth) finds 0.43–0.56 of the reversals at precision 0.68–0.89
  (benchmarks/results/ranking_outliers_bayes.md). When a change meets the target this test fails and must
  become a plain assertion.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crowdflow.ranking import undetectable_rows
from crowdflow.ranking.laws import bh_reject, fit_law, law_flags, law_pvalues, outcome_law
from crowdflow.synth.ranking import PlantedInstance, PlantedSpec, oracle_pvalues, planted_instance

LAWS: list[dict[str, Any]] = [
    {"outcome": "pm1_btl"},
    {"outcome": "pm1_thurstone", "tie_width": 0.0},
    {"outcome": "pm1_thurstone", "tie_width": 0.25},
]
LAW_IDS = ["btl", "thurstone", "ties"]
SPARSE: dict[str, Any] = {"n": 300, "rows_per_item": 8, "design": "uniform", "sigma": 0.1}


def _draw(law: dict[str, Any], seed: int, frac: float = 0.1) -> PlantedInstance:
    return planted_instance(PlantedSpec(**SPARSE, **law, frac=frac, outlier_gap=5.0), seed)


def _recall_precision(flags: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    tp = float((flags & truth).sum())
    return tp / float(truth.sum()), tp / max(float(flags.sum()), 1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("law", LAWS, ids=LAW_IDS)
def test_sparse_clean_draws_flag_nothing(law: dict[str, Any], seed: int) -> None:
    """Clean sparse draws of every ±1 law: no row flagged (measured: none on all 9)."""
    g = _draw(law, seed, frac=0.0).graph
    assert not law_flags(g).flags.any()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("law", LAWS, ids=LAW_IDS)
def test_sparse_reversals_known_set_reaches_the_oracle(law: dict[str, Any], seed: int) -> None:
    """The reversal set known, the law fitted to the other rows at ridge 10⁻⁴ and the rule's cut: recall within 0.1
    of the oracle's and precision ≥ 0.95 (measured 0.83–0.95 at 1.0; oracle 1.0). The rows hold the information; the
    rule's loss is in finding the set (benchmarks/results/ranking_outliers_sparse.md)."""
    inst = _draw(law, seed)
    g = inst.graph
    truth = inst.outlier & ~undetectable_rows(g)
    assert truth.sum() >= 100
    z = np.sign(g.y)
    known = fit_law(g, np.where(inst.outlier, 0.0, g.w), law=outcome_law(g.y), link="logit", ridge=1e-4)
    r_known, p_known = _recall_precision(bh_reject(law_pvalues(z, g.gradient(known.s), known.tau, "logit"), g.w), truth)
    r_or, _ = _recall_precision(bh_reject(oracle_pvalues(inst), g.w), truth)
    assert r_known >= min(r_or, 0.9) - 0.1 and p_known >= 0.95, (r_known, p_known, r_or)


@pytest.mark.parametrize("law", LAWS, ids=LAW_IDS)
def test_sparse_reversals_flag_at_most_one_percent_of_clean_rows(law: dict[str, Any]) -> None:
    """Sparse draws with reversals: the rule flags at most 1 % of the clean rows (measured 0–0.8 %)."""
    inst = _draw(law, 0)
    flags = law_flags(inst.graph).flags
    assert flags[~inst.outlier].mean() <= 0.01


@pytest.mark.xfail(
    strict=True,
    reason="issue #35 item 4: ±1 recall on sparse designs is 0–0.31 against the oracle's 1.0; the Bayes detector "
    "(generator's own model) reaches about 0.5 on this draw",
)
def test_sparse_reversals_meet_the_oracle_target() -> None:
    """The target on the sparse BTL draw (seed 0): recall within 0.05 of the oracle's, capped at 0.9 (measured 0.06
    against 1.0)."""
    inst = _draw(LAWS[0], 0)
    g = inst.graph
    truth = inst.outlier & ~undetectable_rows(g)
    r_rule, _ = _recall_precision(law_flags(g).flags, truth)
    r_or, _ = _recall_precision(bh_reject(oracle_pvalues(inst), g.w), truth)
    assert min(r_rule, 0.9) >= min(r_or, 0.9) - 0.05, (r_rule, r_or)
