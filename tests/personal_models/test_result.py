"""The certificate and the result tables (crowdflow.personal_models.result).

The certified bound ‖Θ̂ − Θ*‖₂ ≤ ‖r‖₂/m_min along runs and at random points (docs/methods/personal_models.md §2.6);
the ``personal_models`` table round-trips through Parquet (AT-19).
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from crowdflow.personal_models import (
    certificate,
    cl_admm,
    djam,
)


def test_certificate_dominates_true_error_along_runs(field, quiet):
    _inst, prob, ref = field
    for fn in (djam, cl_admm):
        res = quiet(fn, prob, seed=4, tol=0.0, max_rounds=3000, reference=ref, trace_every=50, engine="simulation")
        d = res.diagnostics
        # per-agent errors are ≤ the global error ≤ the bound: max_i ‖θ̂_i − θ_i*‖ ≤ error_bound
        max_abs = d["max_rel_err"] * np.linalg.norm(ref, axis=1).max()
        assert (d["error_bound"] > 0).all()
        assert (d["max_rel_err"] * np.linalg.norm(ref, axis=1).min() <= d["error_bound"]).all()
        assert max_abs.iloc[-1] < max_abs.iloc[0]
    # exact check at many random points: ‖Θ − Θ*‖ ≤ ‖∇J(Θ)‖/m_min
    rng = np.random.default_rng(0)
    for scale in (1e-8, 1e-4, 1.0, 10.0):
        th = ref + scale * rng.standard_normal(ref.shape)
        _, bound, _ = certificate(prob, th)
        assert bound >= np.linalg.norm(th - ref)


def test_at19_personal_models_roundtrip_parquet(field):
    _inst, prob, _ref = field
    res = djam(prob, seed=0, engine="simulation")
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(res.personal_models, preserve_index=False), buf)
    back = pq.read_table(io.BytesIO(buf.getvalue())).to_pandas()
    pd.testing.assert_frame_equal(back, res.personal_models)
    assert len(back) == prob.n and back["agent"].is_unique
    assert list(back.columns) == ["agent", "theta", "residual", "component", "n_samples"]
    d = res.diagnostics
    assert list(d.columns) == [
        "round",
        "kkt_norm",
        "error_bound",
        "rel_error_bound",
        "mean_rel_err",
        "max_rel_err",
        "V",
        "missing_reason",
    ]
