"""Degenerate inputs get explicit statuses or a DegenerateInput, never NaN or a numpy error (issue #9, item 5)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from crowdflow.contracts.errors import CrowdflowError, DegenerateInput
from crowdflow.personal_models import fit_personal_models
from crowdflow.personal_rankings import fit_personal_rankings
from crowdflow.ranking import fit_hlasso, fit_hodgerank, fit_lbi
from crowdflow.skills import fit_skills

CMP = pd.DataFrame(
    {"annotator": ["u1", "u1", "u2"], "item_a": ["a", "b", "a"], "item_b": ["b", "c", "c"], "outcome": [1.0, 1.0, -1.0]}
)
AGENTS = pd.DataFrame({"agent": ["a", "b", "c"], "y": [1.0, 2.0, 3.0]})
EDGES = pd.DataFrame({"source": ["a", "b"], "target": ["b", "c"], "weight": [1.0, 1.0]})


def _finite(*arrays: object) -> bool:
    return all(np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in arrays)


# skills ------------------------------------------------------------------------------------------


def test_skills_without_identifiable_worker() -> None:
    """One shared task between two workers (a bipartite edge): nothing to fit, an explicit status."""
    df = pd.DataFrame({"task": ["t1", "t1", "t2"], "worker": ["1", "2", "1"], "label": ["x", "y", "x"]})
    res = fit_skills(df, method="pgd")
    assert res.metadata["fit_status"] == "no_identifiable_worker"
    assert res.metadata["iterations"] == 0 and res.metadata["frac_workers_identified"] == 0.0
    assert set(res.skills["status"]) == {"bipartite_component"} and not res.skills["identifiable"].any()
    assert res.consensus["fallback"].all() and _finite(res.consensus["confidence"], res.skills["vote_weight"])


@pytest.mark.parametrize("method", ["pgd", "onecoin_ds", "ds"])
def test_skills_non_convergence_is_a_status(method: str) -> None:
    rng = np.random.default_rng(1)
    rows = [(f"t{t}", f"w{w}", str(rng.integers(0, 2))) for t in range(30) for w in range(5) if rng.random() < 0.7]
    df = pd.DataFrame(rows, columns=["task", "worker", "label"])
    with pytest.warns(RuntimeWarning, match="without converging"):
        res = fit_skills(df, method=method, max_iter=1, ds_max_iter=1, tol=1e-15, ds_tol=1e-15)
    assert res.metadata["fit_status"] == "not_converged" and res.metadata["converged"] is False
    assert _finite(res.consensus["confidence"], res.skills["accuracy"])


def test_skills_status_of_converged_and_closed_form_fits() -> None:
    df = pd.DataFrame(
        {"task": ["t1"] * 3 + ["t2"] * 3, "worker": ["1", "2", "3"] * 2, "label": ["x", "x", "y", "y", "y", "y"]}
    )
    assert fit_skills(df, method="pgd").metadata["fit_status"] == "converged"
    assert fit_skills(df, method="mv").metadata["fit_status"] == "closed_form"


# rankings ----------------------------------------------------------------------------------------


def test_hodgerank_disconnected_and_constant() -> None:
    two = pd.concat([CMP, pd.DataFrame({"annotator": ["u"], "item_a": ["x"], "item_b": ["y"], "outcome": [1.0]})])
    with pytest.raises(ValueError, match="not connected"):
        fit_hodgerank(two, allow_disconnected=False)
    res = fit_hodgerank(two, allow_disconnected=True)
    assert res.params["n_components"] == 2 and _finite(res.ranking["score"])
    flat = fit_hodgerank(CMP.assign(outcome=0.0))
    assert (flat.ranking["score"] == 0.0).all() and (flat.ranking["rank"] == 1).all()  # all tied, not NaN


@pytest.mark.parametrize("fit", [fit_lbi, fit_hlasso])
def test_robust_ranking_non_convergence_is_flagged(fit) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the budget stop must iterate; the default (adaptive) stops LBI at t = 0 on this clean triangle
        res = fit(CMP, max_iter=1, stop_rule="budget")
    assert res.converged is False
    assert _finite(res.ranking["score"], res.outliers["gamma"])


def test_personal_rankings_degenerate_inputs() -> None:
    with pytest.raises(DegenerateInput, match="choose a rank <= 2") as err:
        fit_personal_rankings(CMP, rank=5)
    assert err.value.reason == "rank_too_large"
    assert isinstance(err.value, ValueError) and isinstance(err.value, CrowdflowError)
    with pytest.raises(DegenerateInput, match="no usable comparison: 3 row"):
        fit_personal_rankings(CMP.assign(outcome=0.0), rank=1)
    with pytest.raises(ValueError, match="rank must be between"):  # a bad argument stays a ValueError
        fit_personal_rankings(CMP, rank=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = fit_personal_rankings(CMP, rank=1, max_iter=1)
    assert res.diagnostics.converged is False and "LIMIT" in res.diagnostics.stop_reason
    assert _finite(res.personal_rankings["score"], res.L, res.R)


# personal models ---------------------------------------------------------------------------------


def test_personal_models_degenerate_inputs() -> None:
    no_data = pd.DataFrame({"agent": ["a", "b"], "y": [1.0, np.nan]})
    with pytest.raises(DegenerateInput, match=r"agent\(s\) \[b\]: no data and no prior") as err:
        fit_personal_models(no_data, EDGES.iloc[:1], reg=0.0)
    assert err.value.reason == "no_data_no_prior"
    with pytest.raises(ValueError, match="not connected"):
        fit_personal_models(AGENTS, EDGES.iloc[:1])
    single = fit_personal_models(AGENTS.iloc[:1], EDGES.iloc[:0], reg=0.1)
    assert single.converged and single.theta[0, 0] == pytest.approx(1.0 / 1.1)
    with pytest.warns(RuntimeWarning):
        res = fit_personal_models(AGENTS, EDGES, max_rounds=1)
    assert res.converged is False and _finite(res.theta, res.kkt_norm, res.error_bound)


# through the CLI: exit 2 with the file named ---------------------------------------------------


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_cli_reports_degenerate_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flows.cli import main

    cmp = tmp_path / "cmp.csv"
    CMP.to_csv(cmp, index=False)
    out = tmp_path / "out"
    assert main(["personal-rank", "--comparisons", str(cmp), "--out", str(out)]) == 2  # default rank 5
    err = capsys.readouterr().err
    assert f"crowdflow: error: {cmp}: rank must be between 1 and min(users, items) = 2, got 5" in err
    assert "choose a rank <= 2" in err and "Traceback" not in err

    agents, edges = tmp_path / "agents.csv", tmp_path / "edges.csv"
    pd.DataFrame({"agent": ["a", "b"], "y": [1.0, np.nan]}).to_csv(agents, index=False)
    EDGES.iloc[:1].to_csv(edges, index=False)
    rc = main(["personal-models", "--agents", str(agents), "--edges", str(edges), "--reg", "0", "--out", str(out)])
    assert rc == 2
    assert f"{agents}: agent(s) [b]: no data and no prior" in capsys.readouterr().err
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_manifest_records_fit_status(tmp_path: Path, rte_dir: Path) -> None:
    from flows.cli import main

    out = tmp_path / "out"
    assert main(["skills", "--labels", str(rte_dir / "labels.csv"), "--method", "mv", "--out", str(out)]) == 0
    (manifest,) = out.rglob("manifest.json")
    fit = json.loads(manifest.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON token {c}"))["fit"]
    assert fit["fit_status"] == "closed_form" and fit["eta"] is None
