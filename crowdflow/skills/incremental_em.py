"""Incremental Dawid–Skene EM: warm starts, E-steps on the tasks new rows touch, a per-task bound, full passes.

docs/methods/skills.md §4.5 (issue #38 item 2). The model and the M-step are those of
:func:`crowdflow.skills.dawid_skene` (full confusion matrices, smoothing α, diagonal prior β): its fixed point
θ* = (π*, q*) and the posteriors T*_t = E(θ*)_t are the target. A run leaves a :class:`DSState` behind: θ, the
posterior T_t of every task, the M-step's sufficient statistics

    G_i[l, m] = Σ_t T_tl · 1{worker i answered m on t},    S_l = Σ_t T_tl,

and, per task, a bound ``slack_t`` on how far its stored posterior can be from the E-step at the stored θ (in
pairwise log-odds; 0 for a task whose posterior was computed at θ).

An update with new rows (:func:`ds_update`):

1. *Partial EM on the touched tasks A* (new tasks and stored tasks that got new rows). Their stored posteriors'
   contributions leave G and S; the untouched tasks' contributions stay fixed, so the partial map
   θ ↦ M(G_base + G_A(E_A(θ)), S_base + S_A(E_A(θ))) is EM for the touched rows under a Dirichlet prior whose
   pseudo-counts are G_base + α + β·1{m = l} and S_base + α. It is run, SQUAREM-accelerated (same safeguards and
   sup-norm stopping rule as the full fit), from the M-step of the stored posteriors (majority shares for new
   tasks) to ``tol``.
2. *Bound on every untouched task.* The E-step's log-posterior of task t is
   ℓ_tl = ln q_l + Σ_{i labels t} ln π_i[l, Y_it] − ln Z_t, so with Δ = ln θ_new − ln θ_old the pairwise log-odds
   change obeys

       |Δ(ℓ_tl − ℓ_tl')| ≤ ρ_q + Σ_{i labels t} ρ_i ≤ ρ_q + n_t · max_i ρ_i,
       ρ_q = max_l Δln q_l − min_l Δln q_l,   ρ_i = max_m (max_l Δln π_i[l, m] − min_l Δln π_i[l, m])

   (exact triangle inequality; the middle form when the task's rows are at hand, the right form from n_t alone).
   Adding the stored slack gives B_t, a bound between the stored posterior and the E-step at the new θ. If every
   pairwise log-odds moves by at most B, a probability p moves by at most
   max(p(1−p)(e^B − 1)/(1 + p(e^B − 1)), p(1−p)(1 − e^{−B})/(1 − p(1 − e^{−B}))) (the odds of l against the
   rest scale by a factor in [e^{−B}, e^B]), and the label can change only if the top two log-probabilities are
   within B (:func:`posterior_bounds`).
3. *Suspects.* Untouched tasks whose bound could flip the label (ties included) or move a probability by more
   than ``margin · tol_prob`` are suspects. By default (``max_rounds=1``) any suspect triggers *full passes*: the
   same EM over every row (``history``) from the full fit's own start, the M-step of every task's majority shares
   (``restart="majority"``), to ``tol``; every slack is then 0. With ``max_rounds > 1`` a few suspects (at most
   ``suspect_share`` of the tasks) join A and step 1 runs again, warm. Without ``history`` nothing more can be
   computed (mode ``bounded``): the suspects keep their stored posteriors, their bound goes into the slack, and
   they are listed.

What is exact and what is bounded: after full passes the state is the full refit (same start, same map, same
fixed point, to ``tol``). Step 2's bound is a theorem (the triangle inequality and the softmax's monotonicity;
checked against brute force and against the exact E-step in the tests). A partial day keeps θ at the fixed point
of the partial map, whose pseudo-counts come from untouched posteriors each within its bound of the E-step at θ:
that θ is then within the tolerance of the refit's is a first-order argument (an error ε in the held posteriors
moves θ by O(ε) relative; the margin < 1 leaves room for it), not a theorem, and the touched tasks come from a
warm start, which on under-determined crowds can end in another local maximum than the refit's majority start;
``tests/incremental/test_ds_incremental.py`` measures both on families. Every task whose bound leaves its label
or a probability beyond ``tol_prob`` open is listed by the run (:attr:`DSUpdate.listed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
import pandas as pd

from crowdflow.compiled import compiled_kernel
from crowdflow.skills.classic_em import _group_by_task
from crowdflow.skills.dawid_skene import (
    EMParameters,
    _confusion_counts,
    _confusion_from_counts,
    _e_step,
    _full_log_pi,
)
from crowdflow.skills.squarem import squarem

log = logging.getLogger(__name__)

#: the format of a stored :class:`DSState` (``.npz``)
STATE_FORMAT = "crowdflow-ds-state/1"

#: two top log-probabilities closer than this are a tie: the label may differ from another run's
TIE_LOGODDS = 1e-9

Mode = Literal["first", "partial", "rounds", "full", "bounded"]

__all__ = [
    "STATE_FORMAT",
    "CodedHistory",
    "Codes",
    "DSState",
    "DSUpdate",
    "History",
    "ds_update",
    "encode_rows",
    "posterior_bounds",
]


class Codes(NamedTuple):
    """Rows as codes of a state: task, worker and class index per row (int64)."""

    task: np.ndarray
    worker: np.ndarray
    label: np.ndarray

    @staticmethod
    def empty() -> Codes:
        z = np.zeros(0, dtype=np.int64)
        return Codes(z, z.copy(), z.copy())

    @staticmethod
    def concat(parts: list[Codes]) -> Codes:
        if not parts:
            return Codes.empty()
        return Codes(*(np.concatenate([getattr(p, f) for p in parts]) for f in Codes._fields))


class History(Protocol):
    """The stored rows, coded as the state codes them (:func:`encode_rows`)."""

    def rows(self, tasks: np.ndarray | None) -> Codes:
        """Every stored row of the given task codes (``None``: every stored row)."""
        ...


@dataclass
class CodedHistory:
    """Stored rows held as codes, in chunks (one per run); :meth:`rows` selects by a task mask (one pass)."""

    chunks: list[Codes] = field(default_factory=list)

    def rows(self, tasks: np.ndarray | None) -> Codes:
        if tasks is None:
            return Codes.concat(self.chunks)
        if not self.chunks:
            return Codes.empty()
        n = max(int(c.task.max(initial=-1)) for c in self.chunks) + 1
        mark = np.zeros(max(n, int(np.max(tasks, initial=-1)) + 1), dtype=bool)
        mark[tasks] = True
        parts = []
        for c in self.chunks:
            sel = mark[c.task]
            parts.append(Codes(c.task[sel], c.worker[sel], c.label[sel]))
        return Codes.concat(parts)

    def extend(self, codes: Codes) -> None:
        if codes.task.size:
            self.chunks.append(codes)


@dataclass(frozen=True)
class DSState:
    """What an incremental Dawid–Skene run leaves behind (module docstring; docs/methods/skills.md §4.5).

    Attributes
    ----------
    tasks, workers, classes : numpy.ndarray
        Ids (str); position = code. Tasks and workers in first-appearance order over the runs.
    confusion : numpy.ndarray
        W×M×M, confusion[i, l, m] = π_i[l, m] = P(worker i answers m | true class l): the stored θ.
    class_prior : numpy.ndarray
        q (M).
    posteriors : numpy.ndarray
        T×M, each task's posterior (the E-step at ``confusion``/``class_prior`` within ``slack``).
    counts : numpy.ndarray
        W×M×M, G_i[l, m] = Σ_t T_tl 1{Y_it = m} of ``posteriors`` (no pseudo-counts).
    class_sums : numpy.ndarray
        S_l = Σ_t T_tl.
    labels_per_task : numpy.ndarray
        n_t (int64).
    slack : numpy.ndarray
        Per task, a bound on the pairwise log-odds distance between the stored posterior and the E-step at the
        stored θ (0: computed at θ).
    smoothing, prior : float
        α and β of the model (``ds_smoothing``, ``ds_prior``).
    """

    tasks: np.ndarray
    workers: np.ndarray
    classes: np.ndarray
    confusion: np.ndarray
    class_prior: np.ndarray
    posteriors: np.ndarray
    counts: np.ndarray
    class_sums: np.ndarray
    labels_per_task: np.ndarray
    slack: np.ndarray
    smoothing: float = 0.01
    prior: float = 1.0
    #: id → code dictionaries of ``tasks`` and ``workers`` (built on first use, handed to the next state; not stored)
    lookup: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_tasks(self) -> int:
        return int(self.tasks.size)

    @property
    def n_workers(self) -> int:
        return int(self.workers.size)

    @property
    def n_classes(self) -> int:
        return int(self.classes.size)

    @classmethod
    def empty(cls, classes: list[str] | np.ndarray, smoothing: float = 0.01, prior: float = 1.0) -> DSState:
        """The state before the first run (no task, no worker): an update from it is a full fit."""
        m = len(classes)
        if m < 2:
            raise ValueError(f"Dawid-Skene needs at least 2 classes, got {list(classes)}")
        z = np.zeros(0)
        return cls(
            tasks=np.array([], dtype=object),
            workers=np.array([], dtype=object),
            classes=np.asarray([str(c) for c in classes], dtype=object),
            confusion=np.zeros((0, m, m)),
            class_prior=np.full(m, 1.0 / m),
            posteriors=np.zeros((0, m)),
            counts=np.zeros((0, m, m)),
            class_sums=np.zeros(m),
            labels_per_task=np.zeros(0, dtype=np.int64),
            slack=z,
            smoothing=float(smoothing),
            prior=float(prior),
        )

    def save(self, path: str | Path) -> None:
        """Write the state as one ``.npz`` (ids as unicode arrays; no pickles)."""
        arrays: dict[str, Any] = {
            k: np.asarray(getattr(self, k), dtype=str) if k in ("tasks", "workers", "classes") else getattr(self, k)
            for k in self.__dataclass_fields__
            if k not in ("smoothing", "prior", "lookup")
        }
        meta = np.array([STATE_FORMAT, repr(self.smoothing), repr(self.prior)], dtype=str)
        with open(path, "wb") as fh:
            np.savez(fh, meta=meta, **arrays)

    @classmethod
    def load(cls, path: str | Path) -> DSState:
        """Read a state written by :meth:`save` (its format checked)."""
        with np.load(path, allow_pickle=False) as z:
            meta = z["meta"]
            if meta[0] != STATE_FORMAT:
                raise ValueError(f"{path}: not a {STATE_FORMAT} file (format {meta[0]!r})")
            data = {k: z[k] for k in z.files if k != "meta"}
        for k in ("tasks", "workers", "classes"):
            data[k] = data[k].astype(object)
        return cls(**data, smoothing=float(meta[1]), prior=float(meta[2]))

    def theta(self) -> np.ndarray:
        """θ flat as :class:`crowdflow.skills.dawid_skene.EMParameters` lays it out: (π, q)."""
        return np.concatenate([self.confusion.ravel(), self.class_prior])


@dataclass(frozen=True)
class DSUpdate:
    """The result of :func:`ds_update`.

    Attributes
    ----------
    state : DSState
    consensus : pandas.DataFrame
        task, label, confidence, n_labels, bound (B_t, pairwise log-odds; 0 where recomputed at the new θ).
    listed : pandas.DataFrame
        The tasks whose label or probabilities may differ from a full refit by more than ``tol_prob``:
        task, label, confidence, bound, max_prob_change, may_flip (ties included).
    codes : Codes
        The new rows coded as the new state codes them (for the caller's history).
    mode : str
        ``"first"`` (from an empty state: a full fit), ``"partial"`` (touched tasks only), ``"rounds"`` (suspects
        recomputed too), ``"full"`` (full passes) or
        ``"bounded"`` (suspects left, no history to recompute them).
    passes : int
        EM evaluations (E+M steps) over all rounds; ``rows_read`` the rows they covered, summed over rounds.
    drift : float
        max_i ρ_i over the old workers plus ρ_q between the start and the end θ.
    converged : bool
        The last EM run met ``tol`` within ``max_iter``.
    rounds : int
        Rounds of EM run (partial rounds and the full passes).
    """

    state: DSState
    consensus: pd.DataFrame
    listed: pd.DataFrame
    codes: Codes
    mode: Mode
    passes: int
    rows_read: int
    drift: float
    converged: bool
    rounds: int


def encode_rows(
    state: DSState, rows: pd.DataFrame, tables: dict[str, dict[str, int]] | None = None
) -> tuple[Codes, np.ndarray, np.ndarray]:
    """Code ``rows`` (task, worker, label) as ``state`` codes them; unseen tasks and workers get the next codes in
    first-appearance order. Returns (codes, new task ids, new worker ids); ``tables`` receives the id → code
    dictionaries extended by the new ids (for the next state). A label outside the state's classes raises
    ``ValueError`` naming it."""
    tables = {} if tables is None else tables
    out = []
    added = []
    for col, known in (("task", state.tasks), ("worker", state.workers)):
        codes, uniq = pd.factorize(rows[col].astype(str).to_numpy(dtype=object))
        table = state.lookup.get(col)
        if table is None or len(table) < known.size:
            table = {str(v): i for i, v in enumerate(known)}
        at = np.fromiter((table.get(u, -1) for u in uniq), dtype=np.int64, count=uniq.size)
        at[at >= known.size] = -1  # ids a later state added (a state updated twice): not this state's
        miss = at < 0
        at[miss] = known.size + np.arange(int(miss.sum()))
        new_ids = np.asarray(uniq[miss], dtype=object)
        table.update(zip(new_ids.tolist(), at[miss].tolist(), strict=True))
        state.lookup[col] = {}  # handed on: the next state owns the table (rebuilt if this state is used again)
        out.append(at[codes])
        added.append(new_ids)
        tables[col] = table
    lab = pd.Index(state.classes).get_indexer(rows["label"].astype(str).to_numpy(dtype=object))
    if (lab < 0).any():
        bad = rows["label"].astype(str).to_numpy()[lab < 0][0]
        raise ValueError(f"label {bad!r} is not one of the state's classes {state.classes.tolist()}")
    return Codes(out[0], out[1], np.asarray(lab, dtype=np.int64)), added[0], added[1]


def posterior_bounds(post: np.ndarray, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """How far posteriors can move when every pairwise log-odds moves by at most ``bound`` (per task).

    The odds of class l against the rest scale by a factor in [e^{−B}, e^{B}], so p_l moves up by at most
    p(1−p)(e^B − 1)/(1 + p(e^B − 1)) and down by at most p(1−p)(1 − e^{−B})/(1 − p(1 − e^{−B})); the label (arg
    max) can change only if ln p_top − ln p_second ≤ B (a tie, within :data:`TIE_LOGODDS`, always may).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The largest probability change per task, and whether its label may flip.
    """
    post = np.ascontiguousarray(post, dtype=np.float64)
    change, flip = np.empty(post.shape[0]), np.empty(post.shape[0], dtype=np.bool_)
    _bounds(post, np.ascontiguousarray(bound, dtype=np.float64), TIE_LOGODDS, change, flip)
    return change, flip


@compiled_kernel
def _bounds(post: np.ndarray, bound: np.ndarray, tie: float, change: np.ndarray, flip: np.ndarray) -> None:
    """:func:`posterior_bounds` task by task (one pass, no T×M temporaries)."""
    n, m = post.shape
    for t in range(n):
        b = bound[t]
        up, down = np.expm1(b), -np.expm1(-b)
        top, second, worst = -1.0, -1.0, 0.0
        for c in range(m):
            p = post[t, c]
            if p > top:
                top, second = p, top
            elif p > second:
                second = p
            if b > 0.0:
                pq = p * (1.0 - p)
                worst = max(worst, pq * up / (1.0 + p * up), pq * down / max(1.0 - p * down, 1e-300))
        change[t] = worst
        flip[t] = m > 1 and ((second <= 0.0 and top <= 0.0) or np.log(top) - np.log(second) <= b + tie)


@compiled_kernel
def _add_counts(task: np.ndarray, rows: np.ndarray, post: np.ndarray, counts_t: np.ndarray, sign: float) -> None:
    """counts_t[l, i·M + m] += sign · T_{task, l} for each row (i, task, m) (``post`` T×M by global task code)."""
    m = post.shape[1]
    for k in range(task.size):
        t, r = task[k], rows[k]
        for c in range(m):
            counts_t[c, r] += sign * post[t, c]


class _PartialMap:
    """The EM map of the active tasks with the other tasks' sums fixed (module docstring, step 1): the ``step`` of
    :func:`crowdflow.skills.squarem.squarem`, θ ↦ (F(θ), Φ(θ), ℓ(θ)) with Φ the log posterior it increases."""

    def __init__(
        self, codes: Codes, active: np.ndarray, base_t: np.ndarray, base_s: np.ndarray, n_tasks: int, st: DSState
    ) -> None:
        m, w = st.n_classes, base_t.shape[1] // st.n_classes
        local = np.full(n_tasks, -1, dtype=np.int64)
        local[active] = np.arange(active.size)
        t = local[codes.task]
        count = np.bincount(t, minlength=active.size)
        self.indptr = np.zeros(active.size + 1, dtype=np.int64)
        np.cumsum(count, out=self.indptr[1:])
        self.rows = _group_by_task(t, codes.worker * m + codes.label, self.indptr)
        self.task = np.repeat(np.arange(active.size, dtype=np.int64), count)
        self.base_t, self.base_s, self.n_tasks = base_t, base_s, n_tasks
        self.par = EMParameters(w, m, False, st.smoothing, st.prior, np.zeros(w))
        diag = (np.arange(w * m) % m)[None, :] == np.arange(m)[:, None]
        self.pseudo = base_t + st.smoothing + st.prior * diag
        self.pseudo_q = base_s + st.smoothing
        self.table, self.counts = np.empty((m, w * m)), np.empty((m, w * m))
        self.log_q, self.post_t = np.empty(m), np.empty((m, active.size))
        self.n_rows = int(codes.task.size)

    def m_step(self, out: np.ndarray) -> None:
        """θ from ``self.post_t`` and the fixed sums into ``out``."""
        pi, q = self.par.split(out)
        _confusion_counts(self.task, self.rows, self.post_t, self.counts)
        self.counts += self.base_t
        _confusion_from_counts(self.counts, self.par.alpha, self.par.beta, pi)
        q[:] = (self.base_s + self.post_t.sum(axis=1) + self.par.alpha) / (self.n_tasks + self.par.m * self.par.alpha)

    def tables(self, theta: np.ndarray) -> None:
        pi, q = self.par.split(theta)
        with np.errstate(divide="ignore"):
            np.log(q, out=self.log_q)
            _full_log_pi(np.ascontiguousarray(pi), self.table)

    def __call__(self, theta: np.ndarray) -> tuple[np.ndarray, float, float]:
        self.tables(theta)
        ll = float(_e_step(self.indptr, self.rows, self.table, self.log_q, self.post_t))
        out = np.empty_like(theta)
        self.m_step(out)
        with np.errstate(invalid="ignore"):
            prior = float((self.pseudo * self.table).sum() + self.pseudo_q @ self.log_q)
        return out, ll + prior, ll

    def posteriors(self, theta: np.ndarray) -> np.ndarray:
        """The E-step at θ (A×M)."""
        self.tables(theta)
        _e_step(self.indptr, self.rows, self.table, self.log_q, self.post_t)
        return np.ascontiguousarray(self.post_t.T)


def _class_major(counts: np.ndarray) -> np.ndarray:
    w, m, _ = counts.shape
    return np.ascontiguousarray(counts.transpose(1, 0, 2).reshape(m, w * m))


def _drift(old: DSState, theta: np.ndarray, w_old: int) -> tuple[np.ndarray, float]:
    """ρ_i for the old workers and ρ_q (module docstring, step 2) between the stored θ and ``theta``."""
    m = old.n_classes
    w = theta[:-m].size // (m * m)
    pi = theta[:-m].reshape(w, m, m)[:w_old]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(pi) - np.log(old.confusion)
        dq = np.log(theta[-m:]) - np.log(old.class_prior)
    rho = (d.max(axis=1) - d.min(axis=1)).max(axis=1) if w_old else np.zeros(0)
    return np.nan_to_num(rho, nan=np.inf), float(np.nan_to_num(dq.max() - dq.min(), nan=np.inf))


def ds_update(
    state: DSState,
    rows: pd.DataFrame,
    history: History | None = None,
    *,
    tol: float = 1e-9,
    tol_prob: float = 1e-4,
    margin: float = 0.5,
    suspect_share: float = 0.05,
    max_rounds: int = 1,
    max_iter: int = 20_000,
    restart: Literal["warm", "majority"] = "majority",
) -> DSUpdate:
    """Add ``rows`` to a Dawid–Skene state by incremental EM (module docstring; docs/methods/skills.md §4.5).

    Parameters
    ----------
    state : DSState
        The last run's state (:meth:`DSState.empty` for the first run: the update is then a full fit).
    rows : pandas.DataFrame
        The new rows: task, worker, label; de-duplicated, and no (task, worker) pair already stored.
    history : History, optional
        The stored rows (coded as ``state`` codes them). Needed when new rows touch stored tasks (their old rows
        leave and re-enter the sums), to recompute suspects and for full passes; without it, suspects are listed.
    tol : float
        The EM stopping rule (sup-norm step of θ) of every round and of the full passes.
    tol_prob : float
        A task is listed when its bound leaves a probability change above this or a label flip open.
    margin : float
        Suspects (recomputed) are tasks whose bound exceeds ``margin · tol_prob`` (or may flip): a margin < 1
        leaves room for the second-order effect of the untouched posteriors on θ.
    suspect_share : float
        More suspects than this share of the tasks trigger full passes instead of another round.
    max_rounds : int
        Rounds of partial EM before full passes. 1 (the default): any suspect triggers full passes. More rounds add
        the suspects to the active tasks and rerun the partial EM, warm: cheaper, but a warm fixed point may be
        another local maximum than the full refit's (measured in docs/methods/skills.md §4.5).
    max_iter : int
        Most EM evaluations per round.
    restart : {"majority", "warm"}
        Where full passes start: the full fit's own start, the M-step of every task's majority shares (the
        default: the full refit's fixed point, at about the full refit's pass count), or the current θ (no fewer
        passes at a tight ``tol`` on the families, and it may reach another local maximum than the full refit).

    Returns
    -------
    DSUpdate
    """
    tables: dict[str, dict[str, int]] = {}
    codes, new_tasks, new_workers = encode_rows(state, rows, tables)
    m = state.n_classes
    t_old, w_old = state.n_tasks, state.n_workers
    n_tasks, n_workers = t_old + new_tasks.size, w_old + new_workers.size
    touched_old = np.unique(codes.task[codes.task < t_old])
    if touched_old.size and history is None:
        raise ValueError(f"{touched_old.size} stored tasks get new rows: their stored rows (history) are needed")
    n_t = np.concatenate([state.labels_per_task, np.zeros(new_tasks.size, dtype=np.int64)])
    n_t += np.bincount(codes.task, minlength=n_tasks)
    post = np.vstack([state.posteriors, _majority(codes, new_tasks.size, t_old, m)])
    g_state = np.zeros((n_workers, m, m))
    g_state[:w_old] = state.counts
    g_state_t = _class_major(g_state)
    stored = _stored(state, n_tasks)
    is_active = np.zeros(n_tasks, dtype=bool)
    is_active[t_old:] = True
    is_active[touched_old] = True
    old_rows = history.rows(touched_old) if history is not None and touched_old.size else Codes.empty()
    _refuse_repeats(old_rows, codes, n_workers, rows)
    theta: np.ndarray | None = None
    passes = rows_read = rounds = 0
    mode: Mode = "partial"
    while True:
        rounds += 1
        full = mode == "full"
        active = np.flatnonzero(is_active)
        if full:
            base_t, base_s = np.zeros_like(g_state_t), np.zeros(m)
        else:  # the stored posteriors of the active old tasks leave the sums
            base_t, base_s = g_state_t.copy(), state.class_sums - stored[active].sum(axis=0)
            _add_counts(old_rows.task, old_rows.worker * m + old_rows.label, stored, base_t, -1.0)
        em = _PartialMap(Codes.concat([old_rows, codes]), active, base_t, base_s, n_tasks, state)
        if theta is None or (full and restart == "majority"):
            start = post[active] if theta is None else _majority(Codes.concat([old_rows, codes]), n_tasks, 0, m)
            theta = np.empty(em.par.n_pi + m)
            em.post_t[:] = start.T
            em.m_step(theta)
        run = squarem(em, theta, tol, max_iter, *em.par.bounds())
        theta = run.theta
        passes += run.evaluations
        rows_read += run.evaluations * em.n_rows
        converged = run.converged
        post[active] = em.posteriors(theta)
        rest = np.flatnonzero(~is_active)
        rho, rho_q = _drift(state, theta, w_old)
        bound = state.slack[rest] + rho_q + n_t[rest] * rho.max(initial=0.0)
        change, flip = posterior_bounds(post[rest], bound)
        cand = np.flatnonzero((change > margin * tol_prob) | flip)
        if history is not None and cand.size:  # sharper: Σ_{i labels t} ρ_i from the candidates' stored rows
            sub = history.rows(rest[cand])
            per_task = np.bincount(sub.task, weights=rho[sub.worker], minlength=n_tasks)
            bound[cand] = state.slack[rest[cand]] + rho_q + per_task[rest[cand]]
            change[cand], flip[cand] = posterior_bounds(post[rest[cand]], bound[cand])
        suspect = rest[(change > margin * tol_prob) | flip]
        log.debug("round %d: %d active, %d suspects, drift %.3g", rounds, active.size, suspect.size, rho.max(initial=0))
        if full or not suspect.size:
            break
        if history is None:
            mode = "bounded"
            break
        if suspect.size > suspect_share * n_tasks or rounds >= max_rounds:
            mode = "full"
            is_active[:] = True
            old_rows = history.rows(None)
            continue
        mode = "rounds"
        is_active[suspect] = True
        old_rows = Codes.concat([old_rows, history.rows(suspect)])
    if t_old == 0:
        mode = "first"  # every task was touched: EM over all rows from the majority start, the full fit itself
    slack = np.zeros(n_tasks)
    slack[rest] = bound
    g_t = base_t  # the sums of the untouched tasks, plus the new posteriors' of the active ones
    act_codes = Codes.concat([old_rows, codes])
    _add_counts(act_codes.task, act_codes.worker * m + act_codes.label, post, g_t, 1.0)
    sums = base_s + post[active].sum(axis=0)
    pi, q = EMParameters(n_workers, m, False, 0.0, 0.0, np.zeros(n_workers)).split(theta)
    new = replace(
        state,
        tasks=np.concatenate([state.tasks, new_tasks]),
        workers=np.concatenate([state.workers, new_workers]),
        confusion=np.array(pi),
        class_prior=np.array(q),
        posteriors=post,
        counts=np.ascontiguousarray(g_t.reshape(m, n_workers, m).transpose(1, 0, 2)),
        class_sums=sums,
        labels_per_task=n_t,
        slack=slack,
        lookup=tables,
    )
    drift = float(rho.max(initial=0.0) + rho_q)
    consensus, listed = _outputs(new, tol_prob)
    log.info(
        "incremental DS: %s, %d rounds, %d passes over %d rows, drift %.3g, %d listed",
        mode,
        rounds,
        passes,
        rows_read,
        drift,
        len(listed),
    )
    return DSUpdate(new, consensus, listed, codes, mode, passes, rows_read, drift, converged, rounds)


def _refuse_repeats(old: Codes, new: Codes, n_workers: int, rows: pd.DataFrame) -> None:
    """A (task, worker) pair may appear once over all runs: a repeat in the new rows, or of a stored pair, raises
    ``ValueError`` naming the first one (the flows de-duplicate before the fit, ``skills.duplicates``)."""
    key = new.task * max(n_workers, 1) + new.worker
    _, first = np.unique(key, return_index=True)
    repeat = np.setdiff1d(np.arange(key.size), first)
    stored = np.flatnonzero(np.isin(key, old.task * max(n_workers, 1) + old.worker))
    bad = np.concatenate([repeat, stored])
    if bad.size:
        k = int(bad.min())
        raise ValueError(
            f"row {k} of the new rows repeats the pair (task={rows['task'].iloc[k]}, worker={rows['worker'].iloc[k]})"
            f"{' already stored' if k in set(stored.tolist()) else ''}: one label per task and worker"
        )


def _stored(state: DSState, n_tasks: int) -> np.ndarray:
    """The stored posteriors padded with zeros for the new tasks (their stored contribution is nothing)."""
    out = np.zeros((n_tasks, state.n_classes))
    out[: state.n_tasks] = state.posteriors
    return out


def _majority(codes: Codes, n_new: int, t_old: int, m: int) -> np.ndarray:
    """Majority shares of the new tasks (the start of their posteriors, as in the full fit)."""
    sel = codes.task >= t_old
    c = np.bincount((codes.task[sel] - t_old) * m + codes.label[sel], minlength=n_new * m).reshape(n_new, m)
    return np.asarray(c / np.maximum(c.sum(axis=1, keepdims=True), 1), dtype=np.float64)


def _outputs(st: DSState, tol_prob: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    change, flip = posterior_bounds(st.posteriors, st.slack)
    winner = st.posteriors.argmax(axis=1) if st.n_tasks else np.zeros(0, dtype=np.int64)
    cons = pd.DataFrame(
        {
            "task": st.tasks,
            "label": st.classes[winner] if st.n_tasks else np.array([], dtype=object),
            "confidence": st.posteriors[np.arange(st.n_tasks), winner],
            "n_labels": st.labels_per_task,
            "bound": st.slack,
        }
    )
    listed = (change > tol_prob) | flip
    out = cons.loc[listed].assign(max_prob_change=change[listed], may_flip=flip[listed])
    return cons, out.reset_index(drop=True)
