"""The entry point fit_personal_models (crowdflow.personal_models.fit) and the doctests.

Besides the entry point's contract, the behaviour fixed by issue #24 (one options model; before, the
task filled the call kwarg by kwarg and the library had other defaults) and issue #18 (bad values in
the agents table are input errors naming the column). Each of these tests failed before the fix.
"""

from __future__ import annotations

import doctest
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

import crowdflow.personal_models.fit as fit_module
import crowdflow.synth.personal_models as synth_module
from crowdflow.contracts.errors import DegenerateInput
from crowdflow.personal_models import PersonalModelsOptions, fit_personal_models


def test_fit_personal_models_entry_point(field):
    inst, _prob, ref = field
    kw = {"loss": "huber", "reg": inst.s, "huber_c": inst.huber_c, "huber_kappa": inst.huber_kappa}
    for method in ("centralized", "djam", "cl_admm", "djam_blocked"):
        res = fit_personal_models(inst.agents, inst.edges, method=method, tol=1e-7, **kw)
        assert res.method == method and res.converged
        np.testing.assert_allclose(res.personal_models["theta"].to_numpy(), ref[:, 0], atol=1e-6)
    with pytest.raises(ValueError, match="unknown method"):
        fit_personal_models(inst.agents, inst.edges, method="nope", **kw)


def test_doctests():
    for module in (fit_module, synth_module):
        res = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert res.failed == 0 and res.attempted >= 2


def test_a_call_with_defaults_is_the_pipelines_fit(field):
    """Before: the pipeline ran the matching engine, a notebook call the simulation engine."""
    inst, _prob, _ref = field
    plain = fit_personal_models(inst.agents, inst.edges)
    assert plain.metadata["engine"] == PersonalModelsOptions().engine == "matching"
    same = fit_personal_models(inst.agents, inst.edges, PersonalModelsOptions())
    np.testing.assert_array_equal(plain.theta, same.theta)
    assert plain.iterations == same.iterations
    # options object and keyword overrides are the same call
    by_kw = fit_personal_models(inst.agents, inst.edges, method="cl_admm", rho=1.0, tol=1e-7)
    by_obj = fit_personal_models(inst.agents, inst.edges, PersonalModelsOptions(method="cl_admm", rho=1.0, tol=1e-7))
    np.testing.assert_array_equal(by_kw.theta, by_obj.theta)
    assert by_kw.metadata["rho"] == 1.0 and by_kw.metadata["engine"] == "matching"
    with pytest.raises(ValidationError, match="tol"):
        fit_personal_models(inst.agents, inst.edges, tol=0.0)


def test_every_method_takes_every_option(field):
    """Before: method centralized with the pipeline's engine option raised TypeError (the task special-cased it)."""
    inst, _prob, ref = field
    o = PersonalModelsOptions(loss="huber", reg=inst.s, huber_c=inst.huber_c, huber_kappa=inst.huber_kappa)
    for method in ("centralized", "djam", "cl_admm", "djam_blocked"):
        res = fit_personal_models(inst.agents, inst.edges, o, method=method, engine="simulation", n_blocks=2, rho=1.0)
        assert res.converged and np.abs(res.theta - ref).max() <= 1e-6


def test_blocked_mode_honours_max_rounds(field):
    """Before: djam_blocked ignored max_rounds (it ran up to 1000 sweeps whatever the spec said)."""
    inst, prob, _ref = field
    m = prob.graph.n_edges
    o = PersonalModelsOptions(loss="huber", reg=inst.s, huber_c=inst.huber_c, huber_kappa=inst.huber_kappa)
    with pytest.warns(RuntimeWarning, match=r"blocked DJAM stopped after 3 sweeps .* \(max_rounds = "):
        res = fit_personal_models(inst.agents, inst.edges, o, method="djam_blocked", max_rounds=3 * m + 5)
    assert not res.converged and res.iterations == 3 * m and res.metadata["sweeps"] == 3
    full = fit_personal_models(inst.agents, inst.edges, o, method="djam_blocked")
    assert full.converged and full.iterations > 3 * m


EDGES = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 1.0]})


@pytest.mark.parametrize(
    ("value", "what"),
    [(np.nan, "non-finite"), (np.inf, "non-finite"), (1e300, "too large")],
)
def test_bad_feature_values_are_input_errors_naming_the_column(value: float, what: str) -> None:
    """Issue #18: before, 1e300 reported 'loss not strongly convex (λ_min = inf)', NaN a bare ValueError."""
    agents = pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5], "x0": [1.0, value, 1.0], "x1": 1.0})
    with pytest.raises(DegenerateInput, match=rf"{what} features for agent\(s\) \[b\] \(column\(s\) 'x0'") as err:
        fit_personal_models(agents, EDGES)
    assert err.value.reason == "bad_features"
    as_list = pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5], "x": [[1.0], [value], [1.0]]})
    with pytest.raises(DegenerateInput, match=r"for agent\(s\) \[b\] \(column\(s\) 'x'"):
        fit_personal_models(as_list, EDGES)


def test_overflowing_products_and_bad_targets_are_input_errors() -> None:
    big = pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5], "x0": [1e100, 1.0, 1.0], "weight": 1e150})
    with pytest.raises(DegenerateInput, match=r"overflow float64 for agent\(s\) \[a\] \(columns \['x0'\], 'weight'\)"):
        fit_personal_models(big, EDGES)
    real_y = pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5]})
    with pytest.raises(
        DegenerateInput, match=r"logistic targets must be 0/1 or ±1, got \[0.5, 1.0, 2.5\] \(column 'y'\)"
    ):
        fit_personal_models(real_y, EDGES, loss="logistic")
    with pytest.raises(DegenerateInput, match=r"too large target y for agent\(s\) \[b\] \(column 'y'"):
        fit_personal_models(real_y.assign(y=[1.0, 1e200, 0.5]), EDGES)
    with pytest.raises(DegenerateInput, match=r"column 'reg': missing or non-finite value for agent\(s\) \[c\]"):
        fit_personal_models(real_y.assign(reg=[0.1, 0.1, np.nan]), EDGES)


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_cli_exit_2_names_file_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #18 through the CLI: before, these were 'unexpected error' (exit 1)."""
    from flows.cli import main

    agents, edges = tmp_path / "agents.csv", tmp_path / "edges.csv"
    pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5], "x0": [1.0, 1e300, 1.0]}).to_csv(agents, index=False)
    EDGES.to_csv(edges, index=False)
    out = tmp_path / "out"
    base = ["personal-models", "--agents", str(agents), "--edges", str(edges), "--out", str(out)]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert f"{agents}: observations: too large features for agent(s) [b] (column(s) 'x0'" in err
    assert "unexpected error" not in err
    pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.5, 0.5]}).to_csv(agents, index=False)
    assert main([*base, "--loss", "logistic"]) == 2
    assert "logistic targets must be 0/1 or ±1, got [0.5, 1.0, 2.5] (column 'y')" in capsys.readouterr().err
    assert main([*base, "--reg", "inf"]) == 2
    assert "personal_models.reg" in capsys.readouterr().err
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
