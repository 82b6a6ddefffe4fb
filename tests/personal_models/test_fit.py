"""The entry point fit_personal_models (crowdflow.personal_models.fit) and the doctests."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import crowdflow.personal_models.fit as fit_module
import crowdflow.synth.personal_models as synth_module
from crowdflow.personal_models import (
    fit_personal_models,
)


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
