"""The flow's worker-sized objects grow by a bounded number of bytes a worker (issue #36, docs/scale.md memory laws).

At a fixed number of labels, the workers are grown 100 → 10,000 (2 classes) and each method but pgd is fitted in
process. Measured per added worker (the two sizes' difference ÷ the workers' difference, so the labels' and tasks'
share cancels):

- the fit's result as the fit task persists it (``cloudpickle``, what the flow process holds and serialises: the
  skills table, the consensus): ≤ ``RESULT_BYTES_PER_WORKER``. Before the ``missing_reason`` column was
  dictionary-encoded each skills row carried its ~150-byte text (333–415 bytes a worker in all; now 145);
- the ``missing_reason`` column itself: ≤ 2 bytes a row (a code; its few texts once);
- Dawid–Skene's EM (``tracemalloc`` peak over the fit, compiled kernels warmed up first): ≤ ``EM_ARRAYS`` float64
  arrays of W·M² (the SQUAREM iterates and differences; the allocations are exact, so the count is too: 7.26 at
  cc83808, 6.25 now; at 10^6 labels and 132,395 workers 9 → 7).

And the dictionary-encoded column is written as before: a run's Parquet file of a table with coded reasons reads
back identical (schema and values) to the one written from the same reasons as text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crowdflow.contracts.missing import MISSING_REASON, explain_missing
from crowdflow.contracts.tables import OUTPUTS
from crowdflow.graphs import worker_graph_report
from crowdflow.labels import encode_labels
from crowdflow.metrics import gold_by_worker
from crowdflow.skills import SkillsOptions, fit_skills
from crowdflow.skills.dawid_skene import dawid_skene
from crowdflow.storage.run_store import REASON_CHUNK_ROWS, _to_arrow, write_parquet

#: bytes a worker the persisted fit result may grow by (measured 145: ~13 float/int columns, the id, the status)
RESULT_BYTES_PER_WORKER = 180
#: θ-sized float64 arrays (W·M² each) Dawid–Skene's EM may add at its peak (measured 6.25; 7.26 at cc83808)
EM_ARRAYS = 6.75
LABELS = 40_000
FEW, MANY = 100, 10_000


def _labels(n_workers: int, seed: int = 0, n_classes: int = 2) -> pd.DataFrame:
    """``LABELS`` labels, 5 distinct workers a task, from ``n_workers`` workers of random accuracy, each of whom
    gives ``LABELS / n_workers`` labels."""
    rng = np.random.default_rng(seed)
    n_tasks, stride = LABELS // 5, n_workers // 5
    truth = rng.integers(0, n_classes, n_tasks)
    task = np.repeat(np.arange(n_tasks), 5)
    slot = (task % stride) + np.tile(np.arange(5), n_tasks) * stride  # 5 distinct slots a task, every slot used
    worker = rng.permutation(n_workers)[slot]
    acc = rng.uniform(0.55, 0.95, n_workers)[worker]
    label = np.where(rng.random(LABELS) < acc, truth[task], rng.integers(0, n_classes, LABELS))
    return pd.DataFrame({"task": [f"t{t}" for t in task], "worker": [f"w{w}" for w in worker], "label": label})


@pytest.fixture(scope="module")
def encoded() -> dict[int, tuple]:
    out = {}
    for w in (FEW, MANY):
        lm = encode_labels(_labels(w))
        assert lm.n_workers == w and lm.n_labels == LABELS
        out[w] = (lm, worker_graph_report(lm))
    return out


@pytest.mark.parametrize("method", ["ds", "onecoin_ds", "mv"])
def test_persisted_fit_grows_by_a_bounded_number_of_bytes_a_worker(method: str, encoded: dict[int, tuple]) -> None:
    size, reason_bytes = {}, {}
    for w, (lm, graph) in encoded.items():
        res = fit_skills(lm, SkillsOptions(method=method, ds_max_iter=30), graph_report=graph)
        skills = res.skills
        assert len(skills) == w and skills[MISSING_REASON].notna().all()  # every row carries a reason here
        size[w] = len(cloudpickle.dumps(res, protocol=5))
        reason_bytes[w] = int(skills[MISSING_REASON].memory_usage(deep=True, index=False))
    per_worker = (size[MANY] - size[FEW]) / (MANY - FEW)
    assert 40 < per_worker <= RESULT_BYTES_PER_WORKER, per_worker  # > 40: the skills rows are really there
    assert (reason_bytes[MANY] - reason_bytes[FEW]) / (MANY - FEW) <= 2


@pytest.mark.filterwarnings("ignore:ds EM stopped")
def test_dawid_skene_em_holds_a_bounded_number_of_parameter_arrays(encoded: dict[int, tuple]) -> None:
    for lm, _ in encoded.values():  # compile and cache the kernels outside the measurement
        dawid_skene(lm, max_iter=3)
    peak = {}
    for w, (lm, _) in encoded.items():
        tracemalloc.start()
        try:
            dawid_skene(lm, max_iter=20, tol=1e-300)  # every cycle runs, extrapolations included
            peak[w] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    theta_bytes = (MANY - FEW) * 2 * 2 * 8  # one float64 W·M² array's growth, M = 2
    arrays = (peak[MANY] - peak[FEW]) / theta_bytes
    assert 3 < arrays <= EM_ARRAYS, arrays  # > 3: θ, F(θ) and the counts table are W·M² by definition


@pytest.mark.parametrize("n", [500, 2 * REASON_CHUNK_ROWS + 7])
def test_coded_reasons_are_written_as_the_same_text(tmp_path: Path, n: int) -> None:
    """The Parquet file of a table whose reasons are dictionary-encoded equals, read back, the file of the same
    table with the reasons as plain text (the form before issue #36): schema and values. Past
    ``REASON_CHUNK_ROWS`` rows the coded table is written a chunk at a time (several row groups, so the reasons'
    text never exists for every row at once): it still reads back as the one-piece file, pandas metadata too."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"worker": [f"w{i}" for i in range(n)], "skill": rng.normal(size=n)})
    df.loc[rng.random(n) < 0.4, "skill"] = np.nan
    explain_missing(df, ["skill"], "no label of this worker is on a task with another worker")
    explain_missing(df, ["skill"], "second reason", where=rng.random(n) < 0.5)
    assert isinstance(df[MISSING_REASON].dtype, pd.CategoricalDtype)
    text = df.assign(**{MISSING_REASON: df[MISSING_REASON].astype("string")})
    for name, schema in (("plain", None), ("skills", OUTPUTS["skills"]["skills"])):
        frame = df if schema is None else df.reindex(columns=schema.names)
        frame_text = text if schema is None else text.reindex(columns=schema.names)
        write_parquet(frame, tmp_path / f"{name}-coded.parquet", schema)
        write_parquet(frame_text, tmp_path / f"{name}-text.parquet", schema)
        a, b = pq.read_table(tmp_path / f"{name}-coded.parquet"), pq.read_table(tmp_path / f"{name}-text.parquet")
        assert pa.types.is_string(a.schema.field(MISSING_REASON).type) or pa.types.is_large_string(
            a.schema.field(MISSING_REASON).type
        )
        assert a.equals(b) and a.schema.equals(b.schema, check_metadata=False)
        got = a.column(MISSING_REASON).to_pylist()
        assert got == [None if pd.isna(x) else x for x in df[MISSING_REASON].astype(object)]
        assert sum(x is not None for x in got) > 100
        groups = pq.ParquetFile(tmp_path / f"{name}-coded.parquet").metadata.num_row_groups
        assert groups == -(-n // REASON_CHUNK_ROWS)  # chunked past REASON_CHUNK_ROWS rows, one piece below
        whole = tmp_path / f"{name}-whole.parquet"  # the former writer: the whole table converted at once
        pq.write_table(_to_arrow(frame, schema), whole)
        c = pq.read_table(whole)
        assert a.equals(c) and a.schema.equals(c.schema, check_metadata=True)
        pd.testing.assert_frame_equal(pd.read_parquet(whole), pd.read_parquet(tmp_path / f"{name}-coded.parquet"))


_WRITE_PEAK = """
import json, sys
import numpy as np, pandas as pd, pyarrow as pa
from pathlib import Path
from typing import Any
from crowdflow.contracts.missing import explain_missing
from crowdflow.contracts.tables import OUTPUTS
from crowdflow.storage.run_store import write_parquet
n = int(sys.argv[1])
df = pd.DataFrame({"worker": pd.array([f"w{i}" for i in range(n)], dtype="str"), "skill": np.full(n, np.nan)})
explain_missing(df, ["skill"], "x" * 300)  # one reason on every row, 300 bytes of text each
schema = OUTPUTS["skills"]["skills"]
frame = df.reindex(columns=schema.names)
before = pa.default_memory_pool().max_memory()
write_parquet(frame, Path(sys.argv[2]), schema)
print(json.dumps({"before": before, "peak": pa.default_memory_pool().max_memory()}))
"""


def test_coded_reasons_are_written_without_the_text_of_every_row(tmp_path: Path) -> None:
    """Writing a skills table whose every row carries a 300-byte reason holds at most a few chunks' text in Arrow
    memory, never every row's (the export's peak at 2·10^5 workers, issue #36): a fresh process's Arrow pool high-water
    mark over the write stays under half the 30 MB that the text of 10^5 rows takes (11.5 MB; 42 MB when the whole
    column was decoded at once)."""
    n = 100_000
    out = subprocess.run(
        [sys.executable, "-c", _WRITE_PEAK, str(n), str(tmp_path / "s.parquet")],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    text_bytes = n * 300
    assert got["peak"] - got["before"] < text_bytes / 2, got
    reasons = pq.read_table(tmp_path / "s.parquet").column(MISSING_REASON).to_pylist()
    assert len(reasons) == n and len(set(reasons)) == 1 and "x" * 300 in reasons[0]


def test_gold_review_makes_text_of_the_gold_rows_only() -> None:
    """The review's per-worker gold table (the inline flow's peak step for mv) allocates a few bytes a label (a mask)
    and text for the gold tasks' rows only: at 2·10^5 labels with 1 % gold tasks ≤ 16 bytes a label under
    ``tracemalloc`` (89 before, when every label's ids became Python strings)."""
    rng = np.random.default_rng(0)
    n = 200_000
    tasks = rng.integers(0, n // 10, n)
    labels = pd.DataFrame(
        {
            "task": pd.array([f"t{t}" for t in tasks], dtype="str"),
            "worker": pd.array([f"w{w}" for w in rng.integers(0, 5000, n)], dtype="str"),
            "label": pd.array(np.array(["a", "b"])[rng.integers(0, 2, n)], dtype="str"),
        }
    )
    truth = pd.DataFrame({"task": [f"t{t}" for t in range(0, n // 10, 100)], "label": "a"})
    want = gold_by_worker(labels, truth)
    tracemalloc.start()
    try:
        got = gold_by_worker(labels, truth)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    pd.testing.assert_frame_equal(got, want)
    assert int(got["n_gold_labels"].sum()) == int(np.isin(tasks, np.arange(0, n // 10, 100)).sum()) > 1000
    assert peak / n <= 16, peak / n


_FREED_PAGES = """
import json, sys
import numpy as np
from crowdflow.memory import give_back, resident_bytes
if sys.argv[1] == "clock":
    from flows.common import Clock
def fill():  # 160 MB of 8 KiB arrays (malloc's heap, under the mmap threshold), then a keeper above them
    arrays = [np.ones(1024) for _ in range(20_000)]
    keeper = np.ones(1024)
    del arrays  # freed below the keeper: malloc keeps the pages (only a free top is returned on free)
    return keeper
out = {}
keep = [fill()]
out["kept"] = resident_bytes()
if sys.argv[1] == "clock":
    Clock().lap("step")
else:
    out["freed"] = give_back()
out["after"] = resident_bytes()
keep.append(fill())
print(json.dumps(out))
"""


@pytest.mark.parametrize("how", ["clock", "give_back"])
def test_a_step_boundary_returns_the_freed_pages_of_the_step(how: str) -> None:
    """A step's worker-sized temporaries, once freed, no longer stand under the next step's peak (issue #36): the
    flow's step boundary (``Clock.lap``) gives malloc's free pages back (``crowdflow.memory.give_back``). A fresh
    process frees 160 MB of 8 KiB arrays below a live one (the pattern of a step's transients under its result):
    without the release the resident size stays up (glibc returns only a free top on ``free``); with it, at
    least 120 MB go back, and what is live is untouched."""
    out = subprocess.run([sys.executable, "-c", _FREED_PAGES, how], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["kept"] - got["after"] >= 120e6, got
    if how == "give_back":
        assert got["freed"] >= 120e6, got


def _pairless_tables(n: int, seed: int = 0) -> tuple[tuple[Any, ...], pd.DataFrame]:
    """``worker_table``'s arguments for ``n`` workers as a pair-free fit of many shapes gives them (the statuses of
    every kind, ids as Python strings in an object array as the run's dictionary holds them), and the report's
    components."""
    from crowdflow.graphs import Components

    rng = np.random.default_rng(seed)
    n_comp = max(1, n // 50)
    labels = rng.integers(0, n_comp, n)
    sizes = np.bincount(labels, minlength=n_comp)
    bip = rng.random(n_comp) < 0.3
    comp_status = np.where(bip, "bipartite_component", "ok").astype(object)
    comp_status[sizes == 1] = "isolated"
    graph = Components(
        n_components=n_comp,
        labels=labels,
        sizes=sizes,
        bipartite=bip,
        colour=(rng.random(n) < 0.5).astype(np.int8),
    )
    status = comp_status[labels]
    workers = np.array([f"worker-{i:07d}" for i in range(n)], dtype=object)
    skill = np.where(status == "ok", rng.uniform(-0.5, 1, n), np.nan)
    n_i = rng.integers(1, 50, n)
    args = (workers, skill, (skill + 1) / 2, np.ones(n), n_i, (np.full(n, np.nan), n_i * 2.0), graph, status,
            status == "ok")  # fmt: skip
    return args, pd.DataFrame({"component": np.arange(n_comp)})


def _traced(fn: Any, *args: Any) -> tuple[Any, int, int]:
    tracemalloc.start()
    try:
        out = fn(*args)
        cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, cur, peak


def test_skills_table_and_its_reasons_are_built_without_a_wide_transient() -> None:
    """The skills table of a pair-free fit (``worker_table``, then ``explain_missing_skills``: the fit step's W-sized
    tables in the flow, issue #36) allocates under ``tracemalloc`` no more than it keeps, plus 8 bytes a worker, and
    its missing reasons ≤ 24 bytes a worker. Before: +56 bytes a worker over the table (a ``<U19`` status column, the
    float columns copied into one 2-D block) and 136 for the reasons (8-byte codes at every step, 2-D NaN masks, the
    statuses as Python strings); the table's values are unchanged (the reference built as before)."""
    from crowdflow.skills.fit import worker_table
    from crowdflow.skills.reasons import explain_missing_skills

    n = 60_000
    args, _ = _pairless_tables(n)
    table, cur, peak = _traced(worker_table, *args)
    assert (peak - cur) / n <= 8, (peak - cur) / n
    workers, skill, acc, vote, n_i, (partners, strength), graph, status, ok = args
    want = pd.DataFrame(
        {"worker": workers, "skill": skill, "accuracy": acc, "vote_weight": vote.astype(np.float64),
         "n_labels": n_i.astype(np.int64), "n_partners": partners, "component": graph.labels.astype(np.int64),
         "status": status.astype(str), "identifiable": ok, "strength": strength.astype(np.float64),
         "lower": np.full(n, np.nan), "upper": np.full(n, np.nan), "fit_component": np.full(n, -1, dtype=np.int64)}
    )  # fmt: skip
    pd.testing.assert_frame_equal(table, want, check_exact=True)
    _, _, peak = _traced(explain_missing_skills, table, None, "ds", False)
    assert peak / n <= 24, peak / n
    reasons = table[MISSING_REASON].astype(object)
    assert reasons[status == "isolated"].str.contains("isolated worker").all()
    assert reasons[status == "ok"].str.startswith("n_partners: distinct co-labellers").all()
    assert reasons.str.contains("lower,upper: the feasibility box is computed by method pgd only").all()


def test_worker_graph_report_builds_its_text_columns_in_arrow() -> None:
    """The worker-graph report's per-worker table (held through the run, issue #36) makes its id and status columns
    without a fixed-width numpy text array: ≤ 96 bytes a worker under ``tracemalloc`` at its peak (measured 83: its
    three 8-byte columns and the components' 8-byte sums and sort; 228 before, with the ``<U`` ids and ``<U19``
    statuses), the same table."""
    from crowdflow.graphs.workers import worker_graph_from_components

    n = 60_000
    args, _ = _pairless_tables(n, seed=1)
    workers, _, _, _, n_i, (partners, _), graph, status, _ = args
    report, _, peak = _traced(worker_graph_from_components, graph, partners, n_i, workers)
    assert peak / n <= 96, peak / n
    assert report.workers["worker"].tolist() == workers.tolist()
    assert report.workers["status"].tolist() == status.tolist()
    assert str(report.workers["worker"].dtype) == "str" and str(report.workers["status"].dtype) == "str"


@pytest.mark.parametrize("kind", ["text", "numeric"])
def test_the_run_worker_dictionary_holds_no_python_string_a_worker(kind: str) -> None:
    """A partitioned run's worker dictionary (:meth:`IdUnion.finish`, held by the flow from the split to the export,
    issue #36) is an Arrow string array sorted in Arrow: under ``tracemalloc`` it keeps ≤ 1 byte a worker of Python
    memory (measured 0.01–0.02; 63–71 when it was an object array of ``str``, the flow's largest per-worker Python
    holder) and its build peaks at ≤ 24 bytes a worker (measured 8 for text ids, 17 for numeric ones: the sort's
    int64 order and float64 keys; 212–269 before), with the order of :func:`~crowdflow.labels.natural_sort`."""
    from crowdflow.labels import natural_sort
    from crowdflow.skills.buckets import SplitSummary
    from crowdflow.skills.partitioned import IdUnion

    n = 60_000
    rng = np.random.default_rng(4)
    ids = [f"worker-{i:07d}" if kind == "text" else str(7 * i) for i in rng.permutation(n)]
    union = IdUnion()
    for f in range(3):
        union.add(SplitSummary(f, 10, f, pa.array(ids[f::3], pa.string()), pa.array(["a", "b"]), sha256=f"d{f}"))
    (workers, classes), cur, peak = _traced(union.finish, None)
    assert isinstance(workers, pa.Array) and classes.tolist() == ["a", "b"]
    assert cur / n <= 1 and peak / n <= 24, (cur / n, peak / n)
    assert workers.to_pylist() == natural_sort(np.array(ids, dtype=object)).tolist()


#: W·M² float64 arrays the flow process adds at its peak while a partitioned Dawid–Skene fit runs on Dask (the EM and
#: its consensus pass, run on a Dask worker: measured 0.11–0.64 in the branch, 1.01 once in a fresh clone's CI run:
#: the 2 W numbers received are 0.5 arrays, and while they are unpickled the message's bytes and the arrays are both
#: alive, 1.0; 10.1 at 7138697, whose EM ran in the flow, so 2 still fails any W·M² array of the EM back in the
#: flow), and the bytes a worker the flow adds over the whole partitioned fit (measured 233–235 for ds and
#: onecoin_ds since the worker dictionary is Arrow text, branch i36-flat9; 290–306 with it as Python strings; 463 at
#: 7138697)
HELD_JOB_ARRAYS = 2.0
HELD_FIT_BYTES_PER_WORKER = 270


def _parquet_folder(folder: Path, n_workers: int) -> Path:
    folder.mkdir()
    labels = _labels(n_workers)
    for i, rows in enumerate(np.array_split(np.arange(len(labels)), 2)):
        labels.iloc[rows].to_parquet(folder / f"part-{i}.parquet")
    return folder


@pytest.mark.filterwarnings("ignore:ds EM stopped", "ignore:onecoin_ds EM stopped")
@pytest.mark.parametrize("method", ["ds", "onecoin_ds"])
def test_partitioned_fit_holds_a_bounded_number_of_bytes_a_worker_in_the_flow(
    tmp_path: Path, dask_map: Any, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """The flow's side of a partitioned Dawid–Skene fit on a two-process Dask cluster (issue #36: the flow holds
    no W·M² array of the EM; the EM runs where the buckets are): ``tracemalloc`` in the flow process, 100 → 10,000
    workers at 40,000 labels, the first fit warming the workers' kernels.

    - the EM and its consensus pass (:func:`crowdflow.skills.held_em.fit_ds_held`, run through
      :func:`crowdflow.executors.elsewhere` as one task on a Dask worker): the flow's peak while it runs is ≤
      ``HELD_JOB_ARRAYS`` W·M² float64 arrays per added worker (it receives 2 W float64, the accuracies and
      weights: 0.5 arrays at M = 2, 1.0 while the message's bytes and the arrays are both alive; measured
      0.11–1.01, lowered by what the collector frees meanwhile). When the EM
      ran in the flow this was 10–13 (SQUAREM's five iterates, the pass's log π, the running sum and a result in
      flight);
    - the whole fit (read, encode, the merged forest, the DS job, the skills and diagnostics tables): ≤
      ``HELD_FIT_BYTES_PER_WORKER`` bytes a worker at its peak (the tables' columns; the worker dictionary is Arrow
      text, which ``tracemalloc`` does not see). The bound is the measured figure plus one W·M² array (32 bytes):
      one W·M² array of the EM back in the flow, or a W-sized holder of Python strings (the dictionary as an
      object array of ``str``, as before branch i36-flat9: ~60 bytes a worker, 290–306 in all), fails it (463
      bytes a worker when the EM ran in the flow)."""
    import crowdflow.skills.partitioned as part

    job_peak: dict[int, int] = {}
    earlier: list[int] = []  # the fit's peak before the job (the job's own peak is measured from a reset)
    elsewhere = getattr(part, "elsewhere", None)  # absent where the EM ran in the flow: the fit bound fails there

    def traced_job(executor: Any, job: Any, held: list[Any], arg: Any, *more: Any) -> Any:
        assert elsewhere is not None
        if job is not part.fit_ds_held:  # the encode's sums, folded on a worker too (branch i36-flat10)
            return elsewhere(executor, job, held, arg, *more)
        start, before = tracemalloc.get_traced_memory()
        earlier.append(before)
        tracemalloc.reset_peak()
        assert elsewhere is not None
        out = elsewhere(executor, job, held, arg, *more)
        job_peak[arg.n_workers] = tracemalloc.get_traced_memory()[1] - start
        return out

    monkeypatch.setattr(part, "elsewhere", traced_job, raising=False)
    fit_peak: dict[int, int] = {}
    for k, w in enumerate((FEW, FEW, MANY)):  # the first fit compiles the workers' kernels: not measured
        folder = _parquet_folder(tmp_path / f"labels-{k}", w)
        opts = SkillsOptions(method=method, ds_max_iter=20, ds_tol=1e-15)  # every cycle runs, extrapolations too
        tracemalloc.start()
        try:
            got = part.fit_skills_partitioned(folder, opts, out_folder=tmp_path / f"out-{k}", executor=dask_map)
            fit_peak[w] = max([tracemalloc.get_traced_memory()[1], *earlier])
            earlier.clear()
        finally:
            tracemalloc.stop()
        assert len(got.result.skills) == w and got.result.metadata["iterations"] == 20
    per_worker = (fit_peak[MANY] - fit_peak[FEW]) / (MANY - FEW)
    assert 2 * 32 < per_worker <= HELD_FIT_BYTES_PER_WORKER, per_worker
    theta_bytes = (MANY - FEW) * 2 * 2 * 8  # one float64 W·M² array's growth, M = 2
    arrays = (job_peak[MANY] - job_peak[FEW]) / theta_bytes
    assert arrays <= HELD_JOB_ARRAYS, arrays


#: bytes a worker the flow adds over a partitioned fit whose skills table a Dask worker builds and holds
#: (``hold_tables``, the pipeline's way since branch i36-flat10; measured 157): the table's columns are no longer
#: among them, so the table built in the flow again (233–235 measured by the test above) fails the bound
HELD_TABLE_FIT_BYTES_PER_WORKER = 200


@pytest.mark.filterwarnings("ignore:ds EM stopped")
def test_a_held_skills_table_stays_off_the_flow_and_is_written_and_reported_as_there(
    tmp_path: Path, dask_map: Any
) -> None:
    """The pipeline's partitioned fit on a two-process Dask cluster keeps the skills table on a Dask worker
    (:class:`crowdflow.storage.held_tables.HeldTable`; docs/scale.md memory laws, issue #36):

    - the flow's ``tracemalloc`` peak over the fit grows ≤ ``HELD_TABLE_FIT_BYTES_PER_WORKER`` a worker (100 →
      10,000 workers at 40,000 labels; measured 157; the same fit building the table in the flow: 233–235);
    - the export writes it from there with the flow's own writer: the run's ``skills.parquet`` is byte-identical to
      the one written from the table built in the flow, flat and hive, with the same ``outputs`` in the manifest;
    - the report rendered where it is held is the page rendered from the flow's table (up to its render time)."""
    import re

    from crowdflow.report import render_report, render_report_holding
    from crowdflow.skills.partitioned import fit_skills_partitioned
    from crowdflow.storage.held_tables import HeldTable
    from crowdflow.storage.run_store import write_run

    opts = SkillsOptions(method="ds", ds_max_iter=20, ds_tol=1e-15)
    peak: dict[int, int] = {}
    for k, w in enumerate((FEW, FEW, MANY)):  # the first fit compiles the workers' kernels: not measured
        folder = _parquet_folder(tmp_path / f"labels-{k}", w)
        tracemalloc.start()
        try:
            held = fit_skills_partitioned(
                folder, opts, out_folder=tmp_path / f"out-{k}", executor=dask_map, hold_tables=str(tmp_path)
            )
            peak[w] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert isinstance(held.held_skills, HeldTable) and len(held.held_skills) == w
        assert held.result.skills.empty
        if k < 2:
            held.held_skills.release()
    per_worker = (peak[MANY] - peak[FEW]) / (MANY - FEW)
    assert per_worker <= HELD_TABLE_FIT_BYTES_PER_WORKER, per_worker

    here = fit_skills_partitioned(folder, opts, out_folder=tmp_path / "out-here", executor=dask_map)
    assert here.held_skills is None and len(here.result.skills) == MANY
    flow_tables: dict[str, Any] = {"skills": here.result.skills, "components": here.result.diagnostics}
    held_tables: dict[str, Any] = {"skills": held.held_skills, "components": held.result.diagnostics}
    manifest = {"run_id": "20261130T000000-x", "pipeline": "p", "job": "skills", "spec": {}}
    for layout in ("flat", "hive"):
        a = write_run(tmp_path / f"a-{layout}", "p", "20261130T000000-x", flow_tables, dict(manifest), layout=layout)
        b = write_run(tmp_path / f"b-{layout}", "p", "20261130T000000-x", held_tables, dict(manifest), layout=layout)
        assert a.outputs == b.outputs and list(b.outputs) == list(flow_tables)
        for name, info in a.outputs.items():
            assert (a.path / info["path"]).read_bytes() == (b.path / info["path"]).read_bytes(), (layout, name)
    page = render_report(manifest, flow_tables)
    rest = {n: None if isinstance(t, HeldTable) else t for n, t in held_tables.items()}
    remote = held.held_skills.apply(render_report_holding, (manifest, rest, "skills", []))
    footer = re.compile(r" in \d+\.\d\d s;")
    assert footer.sub("", remote.html) == footer.sub("", page.html)
    assert [f.id for f in remote.figures] == [f.id for f in page.figures]
    held.held_skills.release()
