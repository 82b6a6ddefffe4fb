"""Tests for crowdflow.ranking.options: one declaration of the ranking options (issues #24, #18).

Ranges and cross-field rules refuse what the fit cannot run, on the model and through the spec parser;
the library, the spec and the lower-level algorithm functions share one set of defaults
(docs/methods/ranking.md §6).
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

from crowdflow.contracts.errors import DegenerateInput, SpecError
from crowdflow.ranking import RankingOptions, fit_hodgerank, fit_lbi, fit_ranking
from crowdflow.ranking.hlasso import hlasso, hlasso_path
from crowdflow.ranking.lbi import lbi_alg2, lbi_alg3, sync_lbi
from crowdflow.ranking.least_squares import LaplacianSolver, refit_without
from crowdflow.ranking.options import HLASSO_MAX_ITER, LBI_MAX_ITER
from crowdflow.ranking.scale import huber_concomitant_scale
from crowdflow.spec import parse_spec
from crowdflow.synth.ranking import comparison_table, huber_instance

SPEC = {"name": "r", "job": "ranking", "comparisons": {"path": "c.csv"}}
FLOAT_FIELDS = [
    name
    for name, f in RankingOptions.model_fields.items()
    if f.annotation in (float, float | None, "float", "float | None")
]


def test_float_fields_found() -> None:
    assert set(FLOAT_FIELDS) == {
        "fdr_q",
        "t_min",
        "budget",
        "huber_m",
        "scale_a",
        "kappa",
        "dt",
        "t_stop",
        "t_max",
        "sigma",
        "lam",
        "lambda_min_ratio",
        "tol",
    }


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_every_float_is_finite(name: str, bad: float) -> None:
    with pytest.raises(ValidationError, match=name):
        RankingOptions(**{name: bad})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kappa", 0.0),
        ("kappa", 1e-300),  # Δt = 1/κ overflows the path
        ("kappa", 1e300),  # no row can enter within any iteration cap
        ("budget", 0.0),
        ("budget", 1.0),
        ("dt", 0.0),
        ("dt", 1e-300),
        ("t_stop", -1.0),
        ("t_max", 0.0),
        ("sigma", 0.0),
        ("sigma", 1e-300),  # the discrepancy target underflows: the rule never fires
        ("lam", 0.0),
        ("n_lambdas", 1),
        ("lambda_min_ratio", 1.0),
        ("lambda_min_ratio", 1e-300),
        ("tol", 0.0),
        ("tol", 1e-300),  # below float64 resolution: FISTA would always run to the cap
        ("huber_m", 0.0),
        ("scale_a", 0.0),
        ("scale_a", 1.5),
        ("max_iter", 0),
        ("checkpoint_every", 0),
        ("n_workers", 0),
        ("seed", -1),  # numpy refuses negative seeds inside the fit
    ],
)
def test_ranges(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        RankingOptions(**{field: value})


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"stop_rule": "time"}, "needs t_stop"),
        ({"lambda_rule": "fixed"}, "needs lam"),
        ({"kappa": 100.0, "dt": 0.02}, "kappa \\* dt"),
        ({"algorithm": 2, "kappa": 10.0, "dt": 0.5}, "kappa \\* dt"),
        ({"huber_m": 0.5}, "scale_a"),
    ],
)
def test_cross_field_rules(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        RankingOptions(**kwargs)


def test_cross_field_rules_accept_the_completed_combination() -> None:
    RankingOptions(stop_rule="time", t_stop=1.0)
    RankingOptions(lambda_rule="fixed", lam=1.0)
    RankingOptions(kappa=100.0, dt=0.019)
    RankingOptions(huber_m=1.0, scale_a=0.5)


def test_strict_and_frozen() -> None:
    with pytest.raises(ValidationError, match="extra"):
        RankingOptions(kapa=1.0)  # type: ignore[call-arg]
    o = RankingOptions()
    with pytest.raises(ValidationError, match="frozen"):
        o.kappa = 1.0  # type: ignore[misc]


def test_every_field_is_described_for_people() -> None:
    doc = inspect.getdoc(RankingOptions) or ""
    assert "Parameters" not in doc and doc.count(".") <= 2
    for name, f in RankingOptions.model_fields.items():
        assert f.description and f.description.endswith("."), name
        assert "\N{SECTION SIGN}" not in f.description, name


@pytest.mark.parametrize(
    ("ranking", "words"),
    [
        ("kappa: .inf", "ranking.kappa"),
        ("kappa: .nan", "ranking.kappa"),
        ("budget: 1.0", "ranking.budget"),
        ("stop_rule: time", "needs t_stop"),
        ("stop_rule: cv", "ranking.stop_rule"),  # the cross-validation rules were removed (#20)
        ("lambda_rule: cv", "ranking.lambda_rule"),
        ("cv_folds: 5", "ranking.cv_folds"),
        ("lambda_rule: fixed", "needs lam"),
        ("seed: -1", "ranking.seed"),
        ("kappa: 100\n  dt: 0.5", "kappa \\* dt"),
    ],
)
def test_spec_refuses_unrunnable_options(ranking: str, words: str) -> None:
    """A spec error (CLI exit 2) at parse time; before, e.g. ``kappa: .inf`` gave all-NaN scores and
    ``stop_rule: time`` failed inside the fit (there was no ``t_stop`` to set)."""
    data = yaml.safe_load(f"name: r\njob: ranking\ncomparisons: {{path: c.csv}}\nranking:\n  {ranking}\n")
    with pytest.raises(SpecError, match=words):
        parse_spec(data)


def test_spec_composes_the_options_model() -> None:
    spec = parse_spec({**SPEC, "ranking": {"outliers": "hlasso", "lambda_rule": "fixed", "lam": 0.5}})
    assert isinstance(spec.ranking, RankingOptions)
    assert spec.ranking == RankingOptions(outliers="hlasso", lambda_rule="fixed", lam=0.5)
    assert parse_spec(SPEC).ranking == RankingOptions()  # the spec's defaults are the library's


def test_infinite_kappa_is_refused_by_the_fit() -> None:
    """Issue #18: ``kappa=inf`` used to run and return all-NaN scores."""
    df = comparison_table(*_arrays())
    with pytest.raises(ValidationError, match="kappa"):
        fit_lbi(df, kappa=math.inf)
    with pytest.raises(ValidationError, match="kappa"):
        fit_ranking(df, RankingOptions(), kappa=math.inf)


def _arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = huber_instance(1).graph
    return g.i, g.j, g.y


def test_library_defaults_are_the_pipeline_defaults() -> None:
    """A notebook call with defaults is the pipeline's fit: disconnected data are ranked per component (the
    task always passed allow_disconnected=True; the library raised by default)."""
    df = pd.DataFrame({"item_a": ["a", "b", "x"], "item_b": ["b", "c", "y"], "outcome": [1.0, 1.0, -1.0]})
    res = fit_hodgerank(df)
    ref = fit_hodgerank(df, allow_disconnected=True)
    pd.testing.assert_frame_equal(res.ranking, ref.ranking)
    assert res.params["n_components"] == 2
    lbi_res = fit_ranking(df)
    assert lbi_res.ranking["component"].nunique() == 2
    with pytest.raises(DegenerateInput, match="not connected") as err:  # exit 2 in the CLI
        fit_ranking(df, allow_disconnected=False)
    assert err.value.reason == "disconnected"


def test_options_object_and_overrides_are_the_same_call() -> None:
    df = comparison_table(*_arrays())
    o = RankingOptions(outliers="hlasso", lambda_rule="fixed", lam=1.0, diagnostics=False)
    a = fit_ranking(df, o)
    b = fit_ranking(df, outliers="hlasso", lambda_rule="fixed", lam=1.0, diagnostics=False)
    c = fit_ranking(df, RankingOptions(outliers="hlasso"), lambda_rule="fixed", lam=1.0, diagnostics=False)
    for other in (b, c):
        for name, table in a.tables.items():
            pd.testing.assert_frame_equal(table, other.tables[name], check_exact=True)
    assert a.params == b.params == c.params


def _default(fn: object, name: str) -> object:
    return inspect.signature(fn).parameters[name].default  # type: ignore[arg-type]


# lower-level function -> {its parameter: the options field whose default it must equal}
LOWER_LEVEL = [
    (lbi_alg2, {"kappa": "kappa", "dt": "dt", "theta0": "theta0", "stop_rule": "stop_rule", "budget": "budget"}),
    (lbi_alg3, {"kappa": "kappa", "dt": "dt", "stop_rule": "stop_rule", "budget": "budget"}),
    (sync_lbi, {"kappa": "kappa", "dt": "dt", "theta0": "theta0", "n_workers": "n_workers", "budget": "budget"}),
    (lbi_alg2, {"t_stop": "t_stop", "sigma": "sigma", "t_max": "t_max", "checkpoint_every": "checkpoint_every"}),
    (hlasso, {"tol": "tol"}),
    (hlasso_path, {"n_lambdas": "n_lambdas", "lambda_min_ratio": "lambda_min_ratio", "tol": "tol"}),
    (huber_concomitant_scale, {"M": "huber_m", "a": "scale_a", "tol": "tol"}),
    (LaplacianSolver, {"method": "solver"}),
    (refit_without, {"solver_method": "solver"}),
]


@pytest.mark.parametrize(("fn", "names"), LOWER_LEVEL)
def test_lower_level_defaults_agree_with_the_options(fn: object, names: dict[str, str]) -> None:
    defaults = RankingOptions()
    for param, field in names.items():
        assert _default(fn, param) == getattr(defaults, field), (fn, param)


def test_iteration_caps_come_from_the_options_module() -> None:
    o = RankingOptions()
    assert _default(hlasso, "max_iter") == _default(hlasso_path, "max_iter") == o.hlasso_max_iter() == HLASSO_MAX_ITER
    for alg, fn in ((2, lbi_alg2), (3, lbi_alg3), (4, sync_lbi)):
        assert _default(fn, "max_iter") == RankingOptions(algorithm=alg).lbi_max_iter() == LBI_MAX_ITER[alg]
    assert RankingOptions(max_iter=7).lbi_max_iter() == RankingOptions(max_iter=7).hlasso_max_iter() == 7


def test_descriptions_are_safe_help_text() -> None:
    """The CLI passes every description to argparse as help, which %-formats it: no bare '%' (a '5 %' broke
    ``crowdflow rank --help``)."""
    for name, f in RankingOptions.model_fields.items():
        assert f.description and "%" not in f.description, name
