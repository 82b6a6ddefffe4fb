"""PersonalRankingsOptions: declared once (spec field = fit argument), ranges and the cross-field rule.

Issue #24 (one declaration of each option) and #18 (non-finite or absurd values are refused where they
are declared: a spec error, exit 2, never an "unexpected error" or a garbage fit).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import ValidationError

from crowdflow.contracts.errors import SpecError
from crowdflow.personal_rankings import (
    PersonalRankingsOptions,
    encode_personal_comparisons,
    fit_personal_rankings,
    select_rank,
)
from crowdflow.personal_rankings.btl import fit_low_rank_btl
from crowdflow.personal_rankings.options import MAX_RANK, MAX_RANK_GRID
from crowdflow.spec import PipelineSpec, parse_spec
from crowdflow.synth.personal_rankings import synthetic_personal_comparisons
from flows.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "crowdflow" / "data" / "samples" / "personal_comparisons.csv"


def _spec(options: dict[str, Any]) -> PipelineSpec:
    return parse_spec(
        {
            "name": "pr",
            "job": "personal_rankings",
            "comparisons": {"path": "cmp.csv"},
            "personal_rankings": options,
        }
    )


# ---------------------------------------------------------------------------------------------------
# one declaration
# ---------------------------------------------------------------------------------------------------


def test_spec_field_is_the_options_model_with_the_same_defaults() -> None:
    spec = _spec({})
    assert type(spec.personal_rankings) is PersonalRankingsOptions
    assert spec.personal_rankings == PersonalRankingsOptions()
    o = _spec({"rank": [1, 2], "method": "rtr", "sigma": 0.3, "lambda_": 2.0, "seed": 4}).personal_rankings
    assert o == PersonalRankingsOptions(rank=[1, 2], method="rtr", sigma=0.3, lambda_=2.0, seed=4)
    with pytest.raises(ValidationError, match="frozen"):
        o.seed = 1  # type: ignore[misc]


def test_options_object_and_keyword_overrides_are_the_same_fit() -> None:
    syn = synthetic_personal_comparisons(15, 2, 5, seed=2)
    o = PersonalRankingsOptions(rank=2, method="rtr", sigma=0.25, seed=3)
    a = fit_personal_rankings(syn.comparisons, o)
    b = fit_personal_rankings(syn.comparisons, rank=2, method="rtr", sigma=0.25, seed=3)
    c = fit_personal_rankings(syn.comparisons, PersonalRankingsOptions(rank=2), method="rtr", sigma=0.25, seed=3)
    same = {k: v for k, v in a.diagnostics.as_dict().items() if k != "time_s"}
    for res in (b, c):
        pd.testing.assert_frame_equal(res.personal_rankings, a.personal_rankings)
        assert {k: v for k, v in res.diagnostics.as_dict().items() if k != "time_s"} == same
    with pytest.raises(TypeError, match="PersonalRankingsOptions"):
        fit_personal_rankings(syn.comparisons, 2)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="extra"):
        fit_personal_rankings(syn.comparisons, rnak=2)


def test_lower_level_functions_take_the_same_options() -> None:
    syn = synthetic_personal_comparisons(15, 2, 5, seed=2)
    res = fit_personal_rankings(syn.comparisons, rank=2, seed=1, lambda_scale=0.5)
    pairs = encode_personal_comparisons(syn.comparisons).pairs
    out, lam = fit_low_rank_btl(pairs, 2, PersonalRankingsOptions(seed=1, lambda_scale=0.5))
    assert lam == res.diagnostics.lambda_ and out.objective == res.diagnostics.objective
    tab = select_rank(pairs, [1, 2], PersonalRankingsOptions(rank_criterion="accuracy", holdout_fraction=0.3))
    assert tab["rank"].tolist() == [1, 2] and tab["selected"].sum() == 1


# ---------------------------------------------------------------------------------------------------
# ranges (#18): every numeric field is finite and bounded where it is declared
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("sigma", 1e-300),
        ("sigma", 0.0),
        ("sigma", 1e4),
        ("lambda_", -1.0),
        ("lambda_", 1e300),
        ("lambda_scale", -0.5),
        ("lambda_scale", 1e6),
        ("K", 0),
        ("K", 10**12),
        ("mu", 1e-300),
        ("mu", 1e8),
        ("alpha", 0.0),
        ("alpha", 1e300),
        ("max_iter", 0),
        ("max_iter", 10**9),
        ("gtol", 0.0),
        ("gtol", 1e-300),
        ("gtol", 1e3),
        ("time_limit", 0.0),
        ("time_limit", 1e9),
        ("seed", -1),
        ("holdout_fraction", 0.0),
        ("holdout_fraction", 1e-300),
        ("holdout_fraction", 0.95),
        ("method", "sgd"),
        ("on_invalid", "ignore"),
        ("rank_criterion", "auc"),
    ],
)
def test_out_of_range_values_are_refused(field: str, bad: object) -> None:
    with pytest.raises(ValidationError, match=field):
        PersonalRankingsOptions(**{field: bad})


@pytest.mark.parametrize("field", ["sigma", "lambda_", "lambda_scale", "mu", "alpha", "gtol", "time_limit"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_floats_must_be_finite(field: str, bad: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        PersonalRankingsOptions(**{field: bad})


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -5,
        -(2**63),
        MAX_RANK + 1,
        [],
        [0],
        [2, 0],
        [1, MAX_RANK + 1],
        list(range(1, MAX_RANK_GRID + 2)),
        2.5,
        "abc",
        True,
        [True, 2],
    ],
)
def test_rank_must_be_a_sane_positive_whole_number_or_grid(bad: object) -> None:
    with pytest.raises(ValidationError, match="rank"):
        PersonalRankingsOptions(rank=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["K", "max_iter", "seed"])
def test_booleans_are_not_numbers(field: str) -> None:
    with pytest.raises(ValidationError, match="whole number"):
        PersonalRankingsOptions(**{field: True})


def test_boundary_values_are_accepted() -> None:
    lo = PersonalRankingsOptions(
        sigma=0.01, mu=0.01, alpha=1e-6, gtol=1e-12, holdout_fraction=0.01, max_iter=1, rank=1, lambda_=0.0
    )
    hi = PersonalRankingsOptions(
        sigma=100.0, mu=100.0, alpha=1e6, gtol=1e-2, holdout_fraction=0.5, max_iter=100_000, rank=[1, MAX_RANK]
    )
    assert lo.sigma == 0.01 and hi.rank == [1, MAX_RANK]
    assert PersonalRankingsOptions(rank=list(range(1, MAX_RANK_GRID + 1))).rank == list(range(1, MAX_RANK_GRID + 1))


# ---------------------------------------------------------------------------------------------------
# cross-field rule: an explicit λ or the rule that would compute it, not both
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", [{"lambda_scale": 2.0}, {"K": 500}, {"lambda_scale": 1.0}])
def test_explicit_lambda_excludes_the_lambda_rule(rule: dict[str, float]) -> None:
    with pytest.raises(ValidationError, match="not used when lambda_ is given"):
        PersonalRankingsOptions(lambda_=3.0, **rule)
    # either one alone is fine, and resolve() applies the same rule to keyword overrides
    assert PersonalRankingsOptions(**rule).lambda_ is None
    assert PersonalRankingsOptions(lambda_=3.0).lambda_ == 3.0
    with pytest.raises(ValidationError, match="not used when lambda_ is given"):
        PersonalRankingsOptions.resolve(PersonalRankingsOptions(lambda_=3.0), **rule)


# ---------------------------------------------------------------------------------------------------
# spec level: a SpecError (exit 2) at parse time, before any data is read
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"seed": -1},  # was accepted; the fit then died in numpy ("unexpected error", exit 1)
        {"sigma": 1e-300},  # was accepted; L-BFGS stopped after 0 iterations on a NaN gradient
        {"lambda_": 1e300},  # was accepted; same NaN gradient
        {"rank": 10**6},  # was accepted; refused only after reading the data
        {"rank": -(2**63)},
        {"holdout_fraction": 0.95},  # was accepted
        {"max_iter": 10**12},  # was accepted
        {"lambda_": 1.0, "lambda_scale": 2.0},  # new fields, conflicting
        {"mu": 0.0},
    ],
)
def test_spec_refuses_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match="personal_rankings"):
        _spec(options)


def test_cli_negative_seed_is_a_usage_error_not_an_unexpected_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["personal-rank", "--comparisons", str(SAMPLE), "--rank", "2", "--seed", "-1", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "unexpected" not in err
    assert list(tmp_path.iterdir()) == []


def test_tiny_sigma_is_refused_by_the_fit_too() -> None:
    """A notebook call goes through the same ranges as a spec (σ = 1e-300 used to end in a NaN gradient)."""
    syn = synthetic_personal_comparisons(10, 2, 5, seed=1)
    with pytest.raises(ValidationError, match="sigma"):
        fit_personal_rankings(syn.comparisons, rank=2, sigma=1e-300)
    with pytest.raises(ValidationError, match="seed"):
        fit_personal_rankings(syn.comparisons, rank=2, seed=-1)
