"""PersonalModelsOptions: declared once, range-checked, combinations checked when the spec is parsed.

docs/methods/personal_models.md §8. Each behaviour fixed by issue #24 / #18 has a test here or in
test_fit.py that failed before the options moved out of crowdflow/spec.py.
"""

from __future__ import annotations

import inspect
import math

import pytest
from pydantic import ValidationError

from crowdflow.contracts.errors import SpecError
from crowdflow.personal_models import PersonalModelsOptions, build_problem, cl_admm, djam, djam_blocked
from crowdflow.spec import PersonalModelsPipeline, parse_spec

SPEC = {
    "name": "pm",
    "job": "personal_models",
    "agents": {"path": "agents.csv"},
    "edges": {"path": "edges.csv"},
}


def test_the_spec_composes_the_options_model() -> None:
    assert PersonalModelsPipeline.model_fields["personal_models"].annotation is PersonalModelsOptions
    spec = parse_spec({**SPEC, "personal_models": {"method": "cl_admm", "rho": 1.0}})
    assert spec.personal_models == PersonalModelsOptions(method="cl_admm", rho=1.0)
    assert parse_spec(SPEC).personal_models == PersonalModelsOptions()
    # the defaults the pipeline has always used (spec compatibility)
    o = PersonalModelsOptions()
    assert (o.loss, o.method, o.reg, o.tol, o.max_rounds, o.rho, o.n_blocks) == (
        "quadratic",
        "djam",
        None,
        1e-8,
        None,
        0.316,
        4,
    )
    assert (o.engine, o.executor, o.dask_address, o.features, o.seed) == ("matching", "inline", None, None, 0)


def test_lower_level_defaults_agree_with_the_options() -> None:
    """Issue #24: djam(engine="simulation") disagreed with the pipeline's engine="matching"."""
    fields = PersonalModelsOptions.model_fields
    alias = {"feature_cols": "features"}
    checked = []
    for fn in (build_problem, djam, djam_blocked, cl_admm):
        for name, param in inspect.signature(fn).parameters.items():
            field = alias.get(name, name)
            # at this level `executor` is the executor object itself, not the inline/dask choice
            if field not in fields or name == "executor" or param.default is inspect.Parameter.empty:
                continue
            assert param.default == fields[field].default, (fn.__name__, name, param.default)
            checked.append((fn.__name__, name))
    assert ("djam", "engine") in checked and ("djam_blocked", "engine") in checked and ("cl_admm", "engine") in checked
    assert ("build_problem", "huber_kappa") in checked and ("djam_blocked", "max_rounds") in checked


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("reg", math.inf),  # issue #18: `reg: .inf` passed the spec and failed inside the fit
        ("reg", -1.0),
        ("reg", 1e13),
        ("prior_mean", math.nan),
        ("prior_mean", 1e101),
        ("huber_c", 0.0),
        ("huber_c", 1e7),
        ("huber_kappa", 1e-300),
        ("huber_kappa", 1e7),
        ("tol", 0.0),
        ("tol", 1e-300),
        ("tol", 1.0),
        ("rho", 1e-300),
        ("rho", 1e5),
        ("max_rounds", 0),
        ("n_blocks", 0),
        ("seed", -1),  # numpy refuses negative seeds: the fit used to fail with an unexpected error
    ],
)
def test_out_of_range_values_are_refused(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        PersonalModelsOptions(**{field: value})


def test_range_bounds_are_accepted() -> None:
    PersonalModelsOptions(reg=0.0, prior_mean=-1e100, huber_c=1e-6, huber_kappa=1e6, tol=1e-12, rho=1e-4)
    PersonalModelsOptions(reg=1e12, prior_mean=1e100, huber_c=1e6, huber_kappa=1e-6, tol=0.5, rho=1e4, seed=2**63 - 1)


@pytest.mark.parametrize("loss", ["ridge", "huber", "logistic"])
def test_losses_that_need_a_prior_refuse_reg_zero(loss: str) -> None:
    with pytest.raises(ValidationError, match=rf"reg: 0 with loss {loss}: the loss is not strongly convex"):
        PersonalModelsOptions(loss=loss, reg=0.0)
    PersonalModelsOptions(loss=loss)  # reg empty: the default 0.1
    PersonalModelsOptions(loss="quadratic", reg=0.0)  # enough data per agent can make it strongly convex


def test_features_rules() -> None:
    with pytest.raises(ValidationError, match="features with loss huber"):
        PersonalModelsOptions(loss="huber", features=["f0"])
    with pytest.raises(ValidationError, match=r"features: \['f0'\] listed more than once"):
        PersonalModelsOptions(features=["f0", "f1", "f0"])
    with pytest.raises(ValidationError, match=r"features: \['y', 'weight'\] cannot be features"):
        PersonalModelsOptions(features=["y", "f0", "weight"])
    assert PersonalModelsOptions(features=["f0", "f1"]).features == ["f0", "f1"]


def test_unknown_choices_name_the_field() -> None:
    with pytest.raises(
        ValidationError, match=r"unknown method 'nope' \(djam \| centralized \| cl_admm \| djam_blocked\)"
    ):
        PersonalModelsOptions(method="nope")
    with pytest.raises(ValidationError, match=r"unknown engine 'threads' \(matching \| simulation\)"):
        PersonalModelsOptions(engine="threads")
    with pytest.raises(ValidationError, match="unknown loss 'l1'"):
        PersonalModelsOptions(loss="l1")
    with pytest.raises(ValidationError, match="extra"):
        PersonalModelsOptions(feature_cols=["f0"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"reg": math.inf}, "personal_models.reg"),
        ({"loss": "logistic", "reg": 0}, "reg: 0 with loss logistic"),
        ({"loss": "huber", "features": ["f0"]}, "features with loss huber"),
        ({"seed": -1}, "personal_models.seed"),
    ],
)
def test_spec_level_refusals(options: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec({**SPEC, "personal_models": options})


def test_frozen_and_resolved() -> None:
    o = PersonalModelsOptions(method="centralized")
    with pytest.raises(ValidationError):
        o.method = "djam"  # type: ignore[misc]
    assert PersonalModelsOptions.resolve(o, reg=0.5) == PersonalModelsOptions(method="centralized", reg=0.5)
    assert o.parallel_blocks is False and PersonalModelsOptions(method="djam_blocked").parallel_blocks


def test_descriptions_for_people() -> None:
    doc = inspect.getdoc(PersonalModelsOptions) or ""
    assert doc and "Parameters" not in doc and "----" not in doc
    for name, f in PersonalModelsOptions.model_fields.items():
        assert f.description and f.description.endswith("."), name
        assert "\n" not in f.description, name
    for name in ("executor", "dask_address"):  # where the fit runs, not what it computes
        assert "not its result" in (PersonalModelsOptions.model_fields[name].description or "")
