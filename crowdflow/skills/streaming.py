"""Skills for label streams larger than memory, in two passes over record batches.

N, Agree and the labels per worker n_i are sums over tasks, so pass 1 (:func:`accumulate_moments`) adds
them up batch by batch in memory O(|E| + W) without keeping the labels; :func:`skills_from_moments` is
the in-memory PGD fit on those statistics; pass 2 (:func:`stream_consensus`) votes task by task. A
task's labels must be contiguous in the stream (docs/methods/skills.md §4.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp

from crowdflow.graphs import graph_structure, pair_counts
from crowdflow.labels import DuplicatePolicy, natural_order
from crowdflow.skills.consensus import vote_weights
from crowdflow.skills.identifiability import active_workers
from crowdflow.skills.moments import LabelMoments, edge_weights, moments_from_packed, pack_counts
from crowdflow.skills.options import SkillsOptions
from crowdflow.skills.rank_one import RankOneFit, fit_active
from crowdflow.skills.reasons import explain_missing_skills
from crowdflow.skills.rows import row_argmax, softmax_rows
from crowdflow.skills.types import Fallback


@dataclass(frozen=True)
class StreamedMoments:
    """Sufficient statistics of a label stream (:func:`accumulate_moments`).

    Attributes
    ----------
    workers, classes : numpy.ndarray
        Sorted ids (as :func:`crowdflow.labels.encode_labels` sorts them); position = dense id.
    n_labels : numpy.ndarray
        Labels per worker (n_i).
    moments : LabelMoments
        N, agreements and C^ over the whole stream, workers in ``workers`` order.
    n_tasks, n_rows, n_duplicates_dropped, n_batches : int
    """

    workers: np.ndarray
    classes: np.ndarray
    n_labels: np.ndarray
    moments: LabelMoments
    n_tasks: int
    n_rows: int
    n_duplicates_dropped: int
    n_batches: int


def _factorize_str(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Codes (order of first appearance) of ids compared as strings, and the distinct strings."""
    codes, uniq = pd.factorize(values)
    ustr = pd.Index(uniq).astype(str).to_numpy(dtype=object)
    c2, u2 = pd.factorize(ustr)
    if len(u2) != len(ustr):
        return np.asarray(c2, dtype=np.int64)[codes], np.asarray(u2, dtype=object)
    return np.asarray(codes, dtype=np.int64), ustr


class _Codebook:
    """Growing string → code mapping (codes in order of first appearance)."""

    def __init__(self, fixed: list[str] | None = None) -> None:
        self.fixed = fixed is not None
        self.index = pd.Index([] if fixed is None else [str(c) for c in fixed], dtype=object)

    def codes(self, values: np.ndarray, what: str) -> np.ndarray:
        codes, uniq = _factorize_str(values)
        pos = self.index.get_indexer(pd.Index(uniq))
        new = pos < 0
        if new.any():
            if self.fixed:
                raise ValueError(
                    f"labels outside the declared label set {self.index.tolist()}: {sorted(uniq[new].tolist())[:5]}"
                )
            start = len(self.index)
            self.index = self.index.append(pd.Index(np.asarray(uniq, dtype=object)[new], dtype=object))
            pos[new] = np.arange(start, start + int(new.sum()))
        return cast(np.ndarray, pos.astype(np.int64)[codes])


def _whole_task_chunks(batches: Iterable[Any], counts: dict[str, int] | None = None) -> Iterator[pd.DataFrame]:
    """Regroup a label stream into frames that each hold whole tasks.

    The rows of the last task of a batch are carried over to the next batch, so a task split across
    consecutive batches is processed once, complete. ``counts`` (optional) receives the number of rows
    and batches read.
    """
    carry: pd.DataFrame | None = None
    for batch in batches:
        df = _batch_frame(batch)
        if counts is not None:
            counts["rows"] += len(df)
            counts["batches"] += 1
        if carry is not None:
            df = pd.concat([carry, df], ignore_index=True)
        if len(df) == 0:
            carry = None
            continue
        tail = (df["task"] == df["task"].iloc[-1]).to_numpy()
        start = len(df) - int(np.argmin(tail[::-1])) if not tail.all() else 0
        carry = df.iloc[start:]
        if start:
            yield df.iloc[:start]
    if carry is not None and len(carry):
        yield carry


def _batch_frame(batch: Any) -> pd.DataFrame:
    if isinstance(batch, pd.DataFrame):
        df = batch
    elif hasattr(batch, "to_pandas"):  # pyarrow RecordBatch / Table
        df = batch.to_pandas()
    else:
        raise ValueError(f"batches must be pyarrow RecordBatches/Tables or DataFrames, got {type(batch).__name__}")
    for col in ("task", "worker", "label"):
        if col not in df.columns:
            raise ValueError(f"labels batch has no column '{col}' (columns: {list(df.columns)})")
        n_null = int(df[col].isna().sum())
        if n_null:
            raise ValueError(f"labels column '{col}' has {n_null} null values")
    return df[["task", "worker", "label"]]


def _grow(m: sp.csr_matrix, n: int) -> sp.csr_matrix:
    if m.shape[0] == n:
        return m
    indptr = np.concatenate([m.indptr, np.full(n - m.shape[0], m.indptr[-1], dtype=m.indptr.dtype)])
    return sp.csr_matrix((m.data, m.indices, indptr), shape=(n, n))


def accumulate_moments(
    batches: Any,
    *,
    classes: list[str] | None = None,
    duplicates: DuplicatePolicy = "error",
    check_tasks: bool = True,
) -> StreamedMoments:
    """Co-label counts N, agreement counts and labels per worker from a stream of label batches.

    The statistics of docs/methods/skills.md §2.1 are sums over tasks, so they can be accumulated chunk by chunk
    (docs/methods/skills.md §4.2): for each chunk, P_b = N_b + K·Agree_b by one integer sparse product
    (``crowdflow.graphs.pair_counts``); the running sum of P_b and of the per-worker label counts
    is all that is kept (memory O(|E| + W), never the labels). Equal, entry for entry, to
    :func:`label_moments` on the concatenated labels.

    **Requirement: a task's labels must be contiguous in the stream** (e.g. the table is sorted or
    grouped by task). A task may straddle the boundary between two consecutive batches: the rows
    of each batch's last task are carried into the next batch. A task whose labels reappear after
    another task started cannot be handled in one pass; with ``check_tasks=True`` (default) this
    is detected — within a batch directly, across batches by a 64-bit hash per finished task
    (8 bytes per task, checked at the end) — and raises ``ValueError``.

    Parameters
    ----------
    batches : iterable
        pyarrow ``RecordBatch`` / ``Table`` or pandas DataFrames with columns ``task, worker,
        label`` (e.g. ``pyarrow.parquet.ParquetFile(path).iter_batches()``).
    classes : list of str, optional
        Declared label set (M); otherwise the labels seen in the stream.
    duplicates : {"error", "keep_last", "keep_first"}
        Policy for a repeated (task, worker) pair (within a task's group).
    check_tasks : bool
        Verify the contiguity requirement.

    Returns
    -------
    StreamedMoments
    """
    worker_book = _Codebook()
    class_book = _Codebook(classes)
    acc = sp.csr_matrix((0, 0), dtype=np.int64)  # type: ignore[arg-type]  # (M, N) shape form; not in the stubs
    n_lab = np.zeros(0, dtype=np.int64)
    task_hashes: list[np.ndarray] = []
    n_tasks = dropped = 0

    def process(df: pd.DataFrame) -> None:
        nonlocal acc, n_lab, n_tasks, dropped
        t_codes, t_uniq = _factorize_str(df["task"].to_numpy())
        if check_tasks and t_codes.size > 1 and bool(np.any(np.diff(t_codes) < 0)):
            bad = t_uniq[int(t_codes[1:][np.diff(t_codes) < 0][0])]
            raise ValueError(
                f"task {bad!r} has labels that are not contiguous in the stream; sort or group the "
                "labels by task before streaming (accumulate_moments)"
            )
        w_codes = worker_book.codes(df["worker"].to_numpy(), "worker")
        c_codes = class_book.codes(df["label"].to_numpy(), "label")
        n_w = len(worker_book.index)
        key = t_codes * n_w + w_codes
        order = np.argsort(key, kind="stable")
        ks = key[order]
        same = ks[1:] == ks[:-1]
        if same.any():
            if duplicates == "error":
                r = order[1:][same][0]
                raise ValueError(
                    f"{int(same.sum())} rows repeat a (task, worker) pair, e.g. "
                    f"(task={t_uniq[t_codes[r]]}, worker={worker_book.index[w_codes[r]]}); "
                    "set duplicates: keep_last or keep_first"
                )
            keep = np.ones(ks.size, dtype=bool)
            if duplicates == "keep_last":
                keep[:-1] = ~same
            else:
                keep[1:] = ~same
            dropped += int((~keep).sum())
            order = order[keep]
        t_sorted = t_codes[order]
        indptr = np.zeros(len(t_uniq) + 1, dtype=np.int64)
        np.cumsum(np.bincount(t_sorted, minlength=len(t_uniq)), out=indptr[1:])
        m_b = max(int(c_codes.max()) + 1 if c_codes.size else 1, 2)
        n_b, ag_b = pair_counts(indptr, w_codes[order], c_codes[order], n_w, m_b)
        acc = _grow(acc, n_w) + pack_counts(n_b, ag_b)
        grown = np.zeros(n_w, dtype=np.int64)
        grown[: n_lab.size] = n_lab
        n_lab = grown + np.bincount(w_codes[order], minlength=n_w)
        n_tasks += len(t_uniq)
        if check_tasks:
            task_hashes.append(pd.util.hash_array(np.asarray(t_uniq, dtype=object)))

    counts = {"rows": 0, "batches": 0}
    for chunk in _whole_task_chunks(batches, counts):
        process(chunk)
    n_rows, n_batches = counts["rows"], counts["batches"]
    if n_rows == 0:
        raise ValueError("labels stream is empty")
    if check_tasks:
        h = np.sort(np.concatenate(task_hashes))
        if h.size > 1 and bool(np.any(h[1:] == h[:-1])):
            raise ValueError(
                f"{int((h[1:] == h[:-1]).sum())} task(s) have labels in non-adjacent parts of the stream; "
                "sort or group the labels by task before streaming (accumulate_moments)"
            )
    raw_workers = np.asarray(worker_book.index, dtype=object)
    perm = natural_order(raw_workers)  # final dense id = natural order, as encode_labels
    acc = sp.csr_matrix(_grow(acc, raw_workers.size)[perm][:, perm])
    if classes is None:
        cls_raw = np.asarray(class_book.index, dtype=object)
        cls = cls_raw[natural_order(cls_raw)]
    else:
        cls = np.asarray([str(c) for c in classes], dtype=object)
    if cls.size < 2:
        raise ValueError(f"need at least 2 classes, the labels use only {cls.tolist()}; declare classes=[...]")
    return StreamedMoments(
        workers=raw_workers[perm],
        classes=cls,
        n_labels=n_lab[perm],
        moments=moments_from_packed(acc, int(cls.size)),
        n_tasks=int(n_tasks),
        n_rows=int(n_rows),
        n_duplicates_dropped=int(dropped),
        n_batches=int(n_batches),
    )


def skills_from_moments(
    streamed: StreamedMoments, options: SkillsOptions | None = None, **overrides: Any
) -> tuple[pd.DataFrame, RankOneFit | None]:
    """Rank-one PGD skills from accumulated statistics (the first pass of a streaming fit).

    The same identifiability check (components, bipartiteness, too_few_labels pruning, policy
    ``flag``), PGD and sign rule as :func:`~crowdflow.skills.fit_skills` with ``method="pgd"``, with the
    same options (``weighting``, ``tau``, ``x0``, ``eta``, ``tol``, ``max_iter``, ``solver``,
    ``sign_mode`` are used; ``options`` as in ``fit_skills``, keyword ``overrides`` replace its fields).
    The co-label statistics are all PGD needs, so the streaming path is PGD whatever ``method`` says
    (Dawid–Skene EM, the default of ``fit_skills``, needs every label at every iteration;
    docs/methods/skills.md §4.2). The skills table has
    the columns worker, skill, accuracy, vote_weight, n_labels, n_partners, component, status,
    identifiable, lower, upper. Feed it to :func:`stream_consensus` for the second pass over the labels.
    """
    o = SkillsOptions.resolve(options, **overrides)
    mo = streamed.moments
    m = int(streamed.classes.size)
    n_mat = mo.co_labels
    structure = graph_structure(n_mat, symmetric=True)
    graph = structure.graph
    w_all = edge_weights(n_mat, o.weighting)
    base = np.where(graph.bipartite, "bipartite_component", "ok").astype(object)
    base[graph.sizes == 1] = "isolated"
    n_i = streamed.n_labels
    status, active, lo, hi, ag, _ = active_workers(graph, base, w_all, n_i, m, o.tau)
    skills, _, fit = fit_active(
        active,
        ag,
        w_all,
        mo.c_hat,
        lo,
        hi,
        x0=o.x0,
        eta=o.eta,
        tol=o.tol,
        max_iter=o.max_iter,
        solver=o.solver,
        sign_mode=o.sign_mode,
    )
    v = vote_weights(skills, m, lo, hi)
    table = pd.DataFrame(
        {
            "worker": streamed.workers.astype(str),
            "skill": skills,
            "accuracy": ((m - 1) * skills + 1) / m,
            "vote_weight": np.where(active, v, 0.0),
            "n_labels": n_i.astype(np.int64),
            "n_partners": np.diff(n_mat.indptr).astype(np.int64),
            "component": graph.labels.astype(np.int64),
            "status": status.astype(str),
            "identifiable": active,
            "lower": lo,
            "upper": hi,
        }
    )
    explain_missing_skills(table, None, "pgd")
    return table, fit


def stream_consensus(
    batches: Any,
    skills: pd.DataFrame,
    classes: list[str] | np.ndarray,
    *,
    fallback: Fallback = "mv",
    duplicates: DuplicatePolicy = "error",
) -> pd.DataFrame:
    """Second pass: MAP weighted vote per task from a label stream (docs/methods/skills.md §2.7, §3.3).

    Same contiguity requirement and carry-over as :func:`accumulate_moments`. Per task:
    score_t(l) = Σ_i v_i 1{Y_it = l} with v from ``skills["vote_weight"]`` (0 for unidentified
    workers), posterior softmax; tasks without an identified labeller fall back to majority vote
    (``fallback="mv"``) or zero weights. Ties go to the first class in label order (the
    in-memory ``tie_break="smallest"`` rule: a random draw indexed by the global task position
    is not available in one pass). Rows come out in stream order of the tasks.

    Parameters
    ----------
    batches : iterable
        The same stream as the first pass (a fresh iterator).
    skills : pandas.DataFrame
        Columns worker, vote_weight, identifiable (e.g. from :func:`skills_from_moments`).
    classes : list of str
        The label set (``StreamedMoments.classes``).
    fallback : {"mv", "zero"}
    duplicates : {"error", "keep_last", "keep_first"}

    Returns
    -------
    pandas.DataFrame
        task, label, confidence, n_labels, fallback.
    """
    cls = np.asarray([str(c) for c in classes], dtype=object)
    m = cls.size
    wid = pd.Index(skills["worker"].astype(str).to_numpy(), dtype=object)
    weight = skills["vote_weight"].to_numpy(dtype=np.float64)
    ident = skills["identifiable"].to_numpy(dtype=bool)
    out: list[pd.DataFrame] = []

    def vote(df: pd.DataFrame) -> None:
        t_codes, t_uniq = _factorize_str(df["task"].to_numpy())
        wc_, wu = _factorize_str(df["worker"].to_numpy())
        w = wid.get_indexer(pd.Index(wu))[wc_]
        if np.any(w < 0):
            raise ValueError("the second pass sees workers that the skills table does not have")
        cc_, cu = _factorize_str(df["label"].to_numpy())
        c = pd.Index(cls).get_indexer(cu)[cc_]
        if np.any(c < 0):
            raise ValueError(f"labels outside the label set {cls.tolist()}")
        key = t_codes * max(len(wid), 1) + w
        order = np.argsort(key, kind="stable")
        ks = key[order]
        same = ks[1:] == ks[:-1]
        if same.any():
            if duplicates == "error":
                raise ValueError("rows repeat a (task, worker) pair; set duplicates: keep_last or keep_first")
            keep = np.ones(ks.size, dtype=bool)
            if duplicates == "keep_last":
                keep[:-1] = ~same
            else:
                keep[1:] = ~same
            order = order[keep]
        t, w, c = t_codes[order], w[order], c[order]
        nt = len(t_uniq)
        cell = t * m + c
        scores = np.bincount(cell, weights=np.where(ident[w], weight[w], 0.0), minlength=nt * m).reshape(nt, m)
        winner = row_argmax(scores)
        post, _ = softmax_rows(scores)
        confidence = post[np.arange(nt), winner]
        n_labels = np.bincount(t, minlength=nt)
        is_fb = np.bincount(t, weights=ident[w].astype(np.float64), minlength=nt) == 0
        if fallback == "mv" and is_fb.any():
            counts = np.bincount(cell, minlength=nt * m).reshape(nt, m)
            mv = row_argmax(counts)
            winner = np.where(is_fb, mv, winner)
            confidence = np.where(is_fb, counts[np.arange(nt), mv] / np.maximum(n_labels, 1), confidence)
        out.append(
            pd.DataFrame(
                {
                    "task": np.asarray(t_uniq, dtype=object).astype(str),
                    "label": cls[winner].astype(str),
                    "confidence": confidence.astype(np.float64),
                    "n_labels": n_labels.astype(np.int64),
                    "fallback": is_fb,
                }
            )
        )

    for chunk in _whole_task_chunks(batches):
        vote(chunk)
    if not out:
        raise ValueError("labels stream is empty")
    return pd.concat(out, ignore_index=True)
