"""The ranking task is a thin call: the spec's options object goes to crowdflow.ranking.fit_ranking as is, and
the tables and params it returns are the library's (issue #24: no dispatch or defaults in the task)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

import tasks.fit
from crowdflow.ranking import RankingOptions, fit_ranking
from crowdflow.synth.ranking import comparison_table, huber_instance


@pytest.mark.parametrize(
    "options",
    [
        RankingOptions(outliers="none"),
        RankingOptions(stop_rule="time", t_stop=0.5, kappa=50.0, diagnostics=False),
        RankingOptions(outliers="hlasso", lambda_rule="magnitude", group_identical=False),
    ],
    ids=["none", "lbi-time", "hlasso-magnitude"],
)
def test_fit_ranking_task_returns_the_library_result(monkeypatch: pytest.MonkeyPatch, options: RankingOptions) -> None:
    monkeypatch.setattr(tasks.fit, "get_run_logger", lambda: logging.getLogger("test"))
    g = huber_instance(2).graph
    df = comparison_table(g.i, g.j, g.y)
    out = tasks.fit.fit_ranking_task.fn(df, options, "key").result
    ref = fit_ranking(df, options)
    assert out["params"] == ref.params  # 'none' used to report only {"method": "hodgerank"}
    assert list(out["tables"]) == list(ref.tables)
    for name, table in ref.tables.items():
        pd.testing.assert_frame_equal(out["tables"][name], table)
    if options.outliers != "none":
        assert out["params"]["method"] == options.outliers


def test_fit_ranking_task_on_the_checks_graph_equals_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow hands the fit the comparison graph its graph check built: the same tables as from the table."""
    from crowdflow.ranking import build_comparison_graph

    monkeypatch.setattr(tasks.fit, "get_run_logger", lambda: logging.getLogger("test"))
    g = huber_instance(3).graph
    df = comparison_table(g.i, g.j, g.y)
    for options in (RankingOptions(), RankingOptions(outliers="none"), RankingOptions(outliers="hlasso")):
        from_graph = tasks.fit.fit_ranking_task.fn(build_comparison_graph(df), options, "key").result
        from_table = tasks.fit.fit_ranking_task.fn(df, options, "key").result
        assert from_graph["params"] == from_table["params"]
        for name, table in from_table["tables"].items():
            pd.testing.assert_frame_equal(from_graph["tables"][name], table)


def test_fit_results_are_stored_on_one_base64_line_and_read_back() -> None:
    from prefect._internal.result_records import ResultRecord, ResultRecordMetadata

    from tasks.results import FIT_RESULTS

    g = huber_instance(2).graph
    tables = dict(fit_ranking(comparison_table(g.i, g.j, g.y)).tables)
    blob = FIT_RESULTS.dumps({"tables": tables})
    assert b"\n" not in blob
    record = ResultRecord(metadata=ResultRecordMetadata(serializer=FIT_RESULTS, storage_key="k"), result=tables)
    back = ResultRecord.deserialize(record.serialize())  # the serializer is found by the type the record names
    assert back.metadata.serializer.type == "crowdflow-fit-pickle"
    for name, table in tables.items():
        pd.testing.assert_frame_equal(back.result[name], table)


@pytest.mark.parametrize("compress_over", [None, 0, 10**9])
def test_a_compressed_fit_record_reads_back_and_old_records_still_do(compress_over: int | None) -> None:
    """The skills fit's serializer stores a pickle over ``compress_over`` bytes zlib-compressed (``zlib:`` + base64):
    through Prefect's record it reads back equal, is one line, is smaller than the plain form for a table with
    repeated values, and a record of the plain form (written before) is still read by the same serializer."""
    from prefect._internal.result_records import ResultRecord, ResultRecordMetadata

    from tasks.results import FIT_RESULTS, SKILLS_FIT_RESULTS, FitResultSerializer

    rng = np.random.default_rng(0)
    n = 20_000
    table = pd.DataFrame(
        {
            "worker": pd.array([f"w{i}" for i in range(n)], dtype="str"),
            "skill": rng.normal(size=n),
            "upper": np.full(n, np.nan),
        }
    )
    ser = FitResultSerializer(compress_over=compress_over)
    blob = ser.dumps({"skills": table})
    plain = FIT_RESULTS.dumps({"skills": table})
    assert b"\n" not in blob
    assert blob.startswith(b"zlib:") == (compress_over == 0)
    if compress_over == 0:
        assert len(blob) < 0.8 * len(plain)
    record = ResultRecord(metadata=ResultRecordMetadata(serializer=ser, storage_key="k"), result={"skills": table})
    back = ResultRecord.deserialize(record.serialize())
    pd.testing.assert_frame_equal(back.result["skills"], table)
    pd.testing.assert_frame_equal(ser.loads(plain)["skills"], table)  # the plain form is read by every instance
    assert SKILLS_FIT_RESULTS.compress_over is not None and FIT_RESULTS.compress_over is None
