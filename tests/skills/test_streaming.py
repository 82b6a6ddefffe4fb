"""Streaming (docs/methods/skills.md §4.2): the two passes over record batches equal the in-memory fit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from crowdflow.skills import fit_skills
from crowdflow.skills.inputs import prepare_labels
from crowdflow.skills.moments import label_moments
from crowdflow.synth import skills as synth


def test_streaming_moments_skills_and_consensus_equal_in_memory():
    from crowdflow.skills import accumulate_moments, skills_from_moments, stream_consensus

    rng = np.random.default_rng(3)
    s = np.where(rng.random(40) < 0.3, 0.0, rng.uniform(0.3, 0.9, 40))
    data = synth.one_coin_labels(s, *synth.random_assignment(40, 600, 4, seed=1), 3, seed=1)
    df = data.labels.sort_values("task", kind="stable").reset_index(drop=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    streamed = accumulate_moments(table.to_batches(max_chunksize=97))  # tasks straddle batches
    assert streamed.n_batches > 5 and streamed.n_tasks == 600 and streamed.n_rows == len(df)
    lm, _ = prepare_labels(df)
    mo = label_moments(lm)
    np.testing.assert_array_equal(streamed.workers, lm.workers)
    np.testing.assert_array_equal(streamed.n_labels, lm.labels_per_worker())
    for attr in ("co_labels", "agreements", "c_hat"):
        a, b = getattr(streamed.moments, attr), getattr(mo, attr)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.data, b.data)
    table_sk, _ = skills_from_moments(streamed)
    ref = fit_skills(df, method="pgd", solver="scaled", tie_break="smallest")
    np.testing.assert_array_equal(table_sk["skill"].to_numpy(), ref.skills["skill"].to_numpy())
    cons = stream_consensus(table.to_batches(max_chunksize=50), table_sk, streamed.classes)
    a = cons.set_index("task").sort_index()
    b = ref.consensus.set_index("task").sort_index()
    assert (a["label"] == b["label"]).all()
    np.testing.assert_allclose(a["confidence"], b["confidence"], rtol=1e-12)
    # a task whose labels are split by another task cannot be streamed in one pass
    bad = pd.concat([df.iloc[:102], df.iloc[300:], df.iloc[102:300]])
    with pytest.raises(ValueError, match="sort or group the labels by task"):
        accumulate_moments([bad.iloc[:150], bad.iloc[150:]])
    with pytest.raises(ValueError, match="not contiguous"):
        accumulate_moments([pd.DataFrame({"task": ["a", "b", "a", "c"], "worker": list("wxyz"), "label": "1"})])
