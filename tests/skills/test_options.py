"""The skills options, declared once (docs/methods/skills.md §8): defaults shared by the library and the
pipeline, a range on every numeric field, and the combinations the fit cannot run refused when the options
are built, i.e. at spec parse (issues #18, #24)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from crowdflow.contracts.errors import SpecError
from crowdflow.skills import SkillsOptions, fit_rank_one, fit_skills, fit_skills_partitioned
from crowdflow.spec import SkillsPipeline, load_spec, parse_spec
from crowdflow.synth import skills as synth

DATA = Path(__file__).resolve().parents[2] / "crowdflow" / "data"


def _spec(skills: dict[str, object]) -> dict[str, object]:
    return {"name": "p", "labels": {"path": "labels.csv"}, "skills": skills}


def test_the_spec_composes_the_options_model_with_the_same_defaults() -> None:
    spec = parse_spec(_spec({}))
    assert isinstance(spec.skills, SkillsOptions) and spec.skills == SkillsOptions()
    assert SkillsPipeline.model_fields["skills"].annotation is SkillsOptions
    # the deployments' example specs and the bundled demo still parse
    for path in [*sorted((Path(__file__).resolve().parents[2] / "deployments" / "specs").glob("*.yaml"))]:
        load_spec(path)
    load_spec(DATA / "demo-rte.yaml")


def test_library_defaults_are_the_pipeline_defaults() -> None:
    """A notebook call and a pipeline run 'with defaults' are the same fit (issue #24).

    Failed before: ``fit_skills`` defaulted to ``solver="gd"`` and no spectral diagnostics,
    ``fit_rank_one`` to ``gd``, while the spec (and so every pipeline run) used ``scaled`` with spectra.
    """
    labels = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
    pipeline = parse_spec(_spec({})).skills
    notebook = fit_skills(labels)
    assert notebook.metadata["solver"] == pipeline.solver == "scaled"
    # the eigenvalues describe the rank-one fit: on by default for pgd only (issue #19: they cost ds more than
    # its EM), the same rule in a notebook and in a pipeline run
    assert (notebook.diagnostics["eig_method"] == "none").all() and not pipeline.spectral_diagnostics
    assert notebook.diagnostics["missing_reason"].str.contains("spectral diagnostics not asked for").all()
    assert (fit_skills(labels, method="pgd").diagnostics["eig_method"] != "none").all()
    assert SkillsOptions(method="pgd").spectral_diagnostics and SkillsOptions(spectral=True).spectral_diagnostics
    same = fit_skills(labels, pipeline)
    pd.testing.assert_frame_equal(notebook.skills, same.skills)
    pd.testing.assert_frame_equal(notebook.diagnostics, same.diagnostics)
    pd.testing.assert_frame_equal(notebook.consensus, same.consensus)
    w = synth.adjacency(synth.ring_edges(5), 5)
    assert fit_rank_one(synth.rank_one_moments(synth.ring_edges(5), np.full(5, 0.6)), w, -1.0, 1.0).solver == "scaled"


def test_options_object_and_keyword_overrides_are_the_same_call() -> None:
    labels = pd.read_csv(DATA / "snow_rte" / "labels.csv", dtype=str)
    a = fit_skills(labels, SkillsOptions(method="onecoin_ds", tie_break="smallest"))
    b = fit_skills(labels, method="onecoin_ds", tie_break="smallest")
    c = fit_skills(labels, SkillsOptions(method="onecoin_ds"), tie_break="smallest")
    for other in (b, c):
        pd.testing.assert_frame_equal(a.consensus, other.consensus)
        pd.testing.assert_frame_equal(a.skills, other.skills)
    with pytest.raises(TypeError, match="SkillsOptions"):
        fit_skills(labels, "mv")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="iterations"):
        fit_skills(labels, iterations=10)


def test_partitioned_fit_takes_the_same_options(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = synth.one_coin_labels(np.linspace(0.2, 0.9, 12), *synth.random_assignment(12, 300, 4, seed=3), 2, seed=3)
    df = data.labels
    folder = tmp_path / "labels"
    folder.mkdir()
    for k in range(3):
        df.iloc[k::3].to_parquet(folder / f"part-{k}.parquet", index=False)
    opts = SkillsOptions(method="pgd", solver="gd", tau=0.5)
    part = fit_skills_partitioned(folder, opts, out_folder=tmp_path / "out")
    ref = fit_skills(df, opts)
    assert part.result.metadata["solver"] == "gd"
    np.testing.assert_array_equal(part.result.skills["skill"].to_numpy(), ref.skills["skill"].to_numpy())
    again = fit_skills_partitioned(folder, out_folder=tmp_path / "out2", method="pgd", solver="gd", tau=0.5)
    np.testing.assert_array_equal(again.result.skills["skill"].to_numpy(), part.result.skills["skill"].to_numpy())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tau", -0.1),
        ("tau", 101.0),
        ("x0", 0.0),
        ("x0", 1.5),
        ("eta", 0.0),
        ("eta", 1e-300),  # a step float64 cannot move the skills with: 'converged' after one update
        ("eta", 2.0),
        ("tol", 0.0),
        ("tol", 1e-300),
        ("tol", 0.5),  # any first step is below it: 'converged' at once
        ("max_iter", 0),
        ("max_iter", 10**8),  # the loss trace alone would take 800 MB
        ("min_pair_count", 0),
        ("dense_eig_max", 0),
        ("dense_eig_max", 10**5),  # a dense 10^5 x 10^5 matrix is 80 GB
        ("spectral_max_nnz", 0),
        ("pair_memory_budget", 0),
        ("ds_tol", 0.0),
        ("ds_tol", 0.5),
        ("ds_max_iter", 0),
        ("ds_smoothing", -0.01),
        ("ds_smoothing", 1e4),
        ("seed", -1),  # numpy refuses a negative seed inside the fit
        ("prune_spammers", (-0.1, 1.0)),
        ("prune_spammers", (0.5, 11.0)),
        ("prune_spammers", (0.5,)),
        ("prune_spammers", (math.inf, 1.0)),
        ("classes", ["a", "a"]),
    ],
)
def test_out_of_range_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        SkillsOptions(**{field: value})
    with pytest.raises(SpecError, match=f"skills.{field}"):
        parse_spec(_spec({field: value}))


@pytest.mark.parametrize("field", ["tau", "x0", "eta", "tol", "ds_tol", "ds_smoothing"])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_floats_are_refused(field: str, bad: float) -> None:
    """Failed before for tau, x0, tol: the spec model accepted .inf (tau: .inf boxes every skill to 0)."""
    with pytest.raises(ValidationError, match="finite"):
        SkillsOptions(**{field: bad})
    with pytest.raises(SpecError, match=f"skills.{field}"):
        parse_spec(_spec({field: bad}))


def test_the_ranges_admit_what_the_fits_use() -> None:
    SkillsOptions(solver="gd", tau=0.0, x0=1.0, eta=1e-12, tol=1e-15, max_iter=10_000_000, dense_eig_max=5000)
    SkillsOptions(solver="gd", eta=1.0, ds_tol=1e-15, ds_smoothing=0.0, seed=2**40, prune_spammers=(0.0, 0.0))
    SkillsOptions(solver="eg", sign_mode="bfs", eta=0.01, spectral_max_nnz=None, prune_spammers=(1.0, 10.0))


def test_eta_with_the_scaled_solver_is_a_spec_error() -> None:
    """Issue #18: ``skills: {eta: 0.01}`` with the default solver. Failed before: the spec parsed and
    the fit raised inside the run ("solver 'scaled' chooses its steps per worker")."""
    with pytest.raises(ValidationError, match="eta"):
        SkillsOptions(eta=0.01)
    with pytest.raises(SpecError, match=r"skills: .*eta .*solver 'scaled'"):
        parse_spec(_spec({"eta": 0.01}))
    assert parse_spec(_spec({"eta": 0.01, "solver": "gd"})).skills.eta == 0.01


def test_eg_without_bfs_signs_is_a_spec_error() -> None:
    """Issue #18: ``solver: eg`` without the sign mode it needs. Failed before: the spec parsed and the
    fit raised inside the run."""
    with pytest.raises(ValidationError, match="bfs"):
        SkillsOptions(solver="eg")
    with pytest.raises(SpecError, match=r"skills: .*solver 'eg' .*sign_mode 'bfs'"):
        parse_spec(_spec({"solver": "eg"}))
    assert parse_spec(_spec({"solver": "eg", "sign_mode": "bfs"})).skills.solver == "eg"


def test_unknown_choices_name_the_field_and_the_choices() -> None:
    with pytest.raises(ValidationError, match=r"unknown method 'kos'; use 'auto', 'pgd', 'onecoin_ds', 'ds', 'mv'"):
        SkillsOptions(method="kos")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"skills.solver: unknown solver 'newton'"):
        parse_spec(_spec({"solver": "newton"}))


def test_cli_exits_2_on_a_spec_the_fit_cannot_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Failed before: ``crowdflow validate`` passed the spec (exit 0); the run then failed inside the fit."""
    from flows.cli import main

    (tmp_path / "labels.csv").write_text((DATA / "snow_rte" / "labels.csv").read_text())
    for skills in ("{eta: 0.01}", "{solver: eg}"):
        spec = tmp_path / "s.yaml"
        spec.write_text(f"name: p\nlabels: {{path: labels.csv}}\nskills: {skills}\n")
        assert main(["validate", str(spec)]) == 2
        err = capsys.readouterr().err
        assert "invalid spec: skills" in err and "unexpected error" not in err


def test_declared_classes_follow_the_numeric_label_rule() -> None:
    """classes are canonical like the labels they are checked against (1.0 is 1), and one class written two
    ways is refused rather than kept as two classes every task ties between."""
    import pydantic

    from crowdflow.skills import SkillsOptions

    assert SkillsOptions(classes=["1.0", "0", "2", "yes"]).classes == ["1", "0", "2", "yes"]
    with pytest.raises(pydantic.ValidationError, match=r"listed twice.*'1\.0' = '1'"):
        SkillsOptions(classes=["1", "1.0", "0"])
    with pytest.raises(pydantic.ValidationError, match="at least 2 distinct"):
        SkillsOptions(classes=["1", "01"])
