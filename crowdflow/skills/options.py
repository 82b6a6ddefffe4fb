"""The options of the skills job, declared once: :class:`SkillsOptions`.

The same frozen model is the ``options=`` argument of :func:`crowdflow.skills.fit_skills` (and of
:func:`crowdflow.skills.skills_from_moments`), the ``skills:`` section of a pipeline spec
(:mod:`crowdflow.spec`) and the form of the Prefect UI, so a default, a range or a choice cannot differ
between a notebook call and a pipeline run. Each numeric field carries the range the numerics can honour;
combinations the fit cannot run are refused when the model is built (a spec error, not a failure inside
the fit). Why each default and each bound: docs/methods/skills.md §8.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

import pandas as pd
from pydantic import Field, ValidationInfo, field_validator, model_validator

from crowdflow.contracts.options import Options, backfill_field, incremental_field
from crowdflow.labels import DuplicatePolicy, canonical_label_text
from crowdflow.skills.crowdkit_adapter import AGGREGATORS, CROWDKIT_PREFIX, is_crowdkit, missing_extra, validate_params
from crowdflow.skills.spectra import DENSE_EIG_MAX
from crowdflow.skills.types import AutoCandidate, Fallback, Method, SignMode, Solver, TieBreak, Weighting

#: the choices of each Literal field, for the "unknown <field>" message
_CHOICES: dict[str, tuple[str, ...]] = {
    "method": get_args(Method),
    "solver": get_args(Solver),
    "weighting": get_args(Weighting),
    "sign_mode": get_args(SignMode),
    "fallback": get_args(Fallback),
    "tie_break": get_args(TieBreak),
    "duplicates": get_args(DuplicatePolicy),
}

#: methods that can use known answers in the fit (their tasks' posteriors pinned), and why the others cannot
GOLD_METHODS = ("ds", "onecoin_ds", "auto")
GOLD_REFUSAL = {
    "pgd": "method pgd (rank-one) fits skills to the agreement rates between pairs of workers, a moment "
    "equation in which a known answer has no term; known answers could only score it. Use method ds or "
    "onecoin_ds (the same one-coin model, by EM) to fit with gold",
    "mv": "method mv (majority vote) fits nothing a known answer could inform; use method ds, onecoin_ds or auto "
    "(which can choose majority vote by the gold answers)",
}


def gold_refusal(method: str) -> str:
    """Why ``method`` cannot take known answers in its fit (the one message, for the options and the fit)."""
    return GOLD_REFUSAL.get(
        method, f"method {method} does not take known answers in its fit; use method ds, onecoin_ds or auto"
    )


#: largest iteration cap: the loss trace keeps one float64 per iteration (10^7 iterations = 80 MB)
MAX_ITERATIONS = 10_000_000


class SkillsOptions(Options):
    """How worker skills are estimated and how the label of each task is chosen.

    Every option, its range and the reason for its default are explained in docs/methods/skills.md §8.
    """

    method: Method = Field(
        "auto",
        description="How the labels are combined: auto holds out a share of each task's labels, fits every "
        "candidate (ds with and without its prior, onecoin_ds, mv) on the rest, keeps the one that predicts the "
        "held-out labels best and refits it on all labels; ds fits a Dawid-Skene model (a table of how often "
        "each worker gives each answer for each true label) by expectation-maximisation, an iterative "
        "maximum-likelihood fit; onecoin_ds fits one accuracy per worker the same way; pgd fits one skill per "
        "worker from how often pairs of workers agree and weights each vote by it; mv is a plain majority vote; "
        "ebcc is the Bayesian model of Li, Rubinstein and Cohn (ICML 2019) whose tasks of each class fall into "
        "subtypes on which workers err together, fitted by variational inference. "
        "crowdkit:<Name> runs that Crowd-Kit aggregator (GLAD, MACE, Wawa, KOS, ZeroBasedSkill, MMSR, DawidSkene, "
        "OneCoinDawidSkene, MajorityVote) itself inside the pipeline; it needs the crowdkit extra "
        "(pip install 'crowdflow[crowdkit]').",
    )
    crowdkit_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameters of the crowdkit: method, by Crowd-Kit's names (empty: Crowd-Kit's defaults). "
        + "; ".join(f"{name}: " + (", ".join(agg.params.model_fields) or "none") for name, agg in AGGREGATORS.items())
        + ".",
    )
    solver: Solver = Field(
        "scaled",
        description="How pgd fits the skills: scaled takes a step sized for each worker and reaches the same "
        "answer in far fewer iterations; gd is the paper's gradient descent with one common step; eg is "
        "exponentiated gradient, which fits positive skills and needs sign_mode bfs.",
    )
    weighting: Weighting = Field(
        "count",
        description="How much a pair of workers counts in the fit: count weighs it by the number of tasks the "
        "two share, binary counts every pair once, square uses the number of shared tasks squared.",
    )
    tau: float = Field(
        1.0,
        ge=0.0,
        le=100.0,
        description="Keeps each skill at least tau divided by the square root of the worker's number of labels "
        "away from a perfect score, so a worker with few labels is never fully trusted; a worker with at most "
        "tau squared labels gets no skill.",
    )
    x0: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Skill every worker starts from in the fit; it must be positive because a fit started "
        "at zero never moves.",
    )
    eta: float | None = Field(
        None,
        ge=1e-12,
        le=1.0,
        description="Fixed step size of the gd or eg solver; leave it empty for the automatic step, which "
        "never increases the fitting error (solver scaled always chooses its own steps).",
    )
    tol: float = Field(
        1e-7,
        ge=1e-15,
        le=1e-2,
        description="The fit stops once no skill changes by more than this from one iteration to the next.",
    )
    max_iter: int = Field(
        5000,
        ge=1,
        le=MAX_ITERATIONS,
        description="Most iterations of the fit; a fit that needs more is reported as not converged.",
    )
    sign_mode: SignMode = Field(
        "sum_rule",
        description="How the overall sign of each group of connected workers is chosen: sum_rule makes the "
        "group's skills sum to a positive number; bfs carries signs from worker to worker along the most "
        "reliable pairs.",
    )
    fallback: Fallback = Field(
        "mv",
        description="Label of a task none of whose workers has a skill estimate: mv takes the majority vote, "
        "zero gives every vote weight zero so the tie-break decides.",
    )
    min_pair_count: int = Field(
        1,
        ge=1,
        description="Pairs of workers that share fewer tasks than this are left out of the fit and of the "
        "identifiability check.",
    )
    prune_spammers: tuple[Annotated[float, Field(ge=0.0, le=1.0)], Annotated[float, Field(ge=0.0, le=10.0)]] | None = (
        Field(
            None,
            description="Optional pair (delta, c) that drops every pair of workers whose agreement looks like "
            "chance, i.e. below delta plus c times the square root of log(workers) over their shared tasks; "
            "empty turns this off.",
        )
    )
    spectral: bool | None = Field(
        None,
        description="Add eigenvalue-based quality figures (how firmly each group of workers pins down its "
        "skills, and an error bound) to the diagnostics table; on large data they cost more than the fit. "
        "Empty means for method pgd only, whose rank-one fit they describe: ds, onecoin_ds and mv would spend "
        "most of their time on them.",
    )
    dense_eig_max: int = Field(
        DENSE_EIG_MAX,
        ge=1,
        le=5000,
        description="Groups of up to this many workers get their eigenvalues from an exact dense solver, "
        "larger groups from an iterative one whose answer is checked (and solved densely when the check fails).",
    )
    witness: bool = Field(
        True,
        description="Report, for each group of workers whose skills can be identified, the length of one odd "
        "cycle of workers (the proof that they can).",
    )
    spectral_max_nnz: int | None = Field(
        2_000_000,
        ge=1,
        description="Groups with more worker pairs than this skip the eigenvalues (reported as skipped); "
        "empty means no limit.",
    )
    pair_memory_budget: int | None = Field(
        8_000_000_000,
        ge=1,
        description="pgd only: the worker pairs it must hold (16 bytes each stored, about 56 at its peak, bounded "
        "before fitting by the sum over tasks of k(k-1)) may take at most this many bytes, or the run is refused "
        "with the figure; empty means no limit.",
    )
    ds_tol: float = Field(
        1e-6,
        ge=1e-15,
        le=1e-2,
        description="The Dawid-Skene methods stop once no estimated probability changes by more than this.",
    )
    ds_max_iter: int = Field(
        1000,
        ge=1,
        le=MAX_ITERATIONS,
        description="Most iterations of the Dawid-Skene methods; a fit that needs more is reported as not "
        "converged (the public gold sets need at most 143).",
    )
    ds_smoothing: float = Field(
        0.01,
        ge=0.0,
        le=1000.0,
        description="Pseudo-count added to every count of the Dawid-Skene methods, which keeps the estimated "
        "probabilities away from exactly 0 and 1.",
    )
    ds_prior: float = Field(
        1.0,
        ge=0.0,
        le=100.0,
        description="Virtual correct answers that method ds adds to each worker's table for every true label, "
        "so that a worker with few labels is not taken to confuse labels systematically; 0 is the classic "
        "Dawid-Skene fit.",
    )
    auto_folds: int = Field(
        5,
        ge=2,
        le=20,
        description="Method auto: the labels of each task are split into this many folds; each fold is held out "
        "once while the candidates are fitted on the others.",
    )
    auto_candidates: list[AutoCandidate] | None = Field(
        None,
        title="Methods auto compares",
        description="Method auto: the candidates it compares (ds, ds_classic, onecoin_ds, mv, ebcc); empty means "
        "ds, ds_classic, onecoin_ds and mv (ebcc only when named).",
    )
    ebcc_subtypes: int = Field(
        10,
        ge=1,
        le=100,
        description="Method ebcc: subtypes per class (groups of tasks on which workers make the same mistakes); "
        "1 is a Bayesian Dawid-Skene model. 10 is the authors' choice.",
    )
    ebcc_subtype_prior: float = Field(
        0.1,
        gt=0.0,
        le=1000.0,
        description="Method ebcc: total Dirichlet weight spread over the subtypes of a class; small values let "
        "few subtypes carry a class (the authors' 0.1).",
    )
    ebcc_class_prior: float | None = Field(
        None,
        gt=0.0,
        le=1e9,
        description="Method ebcc: Dirichlet weight of each class's share; empty uses the majority-vote count "
        "of each class (the authors' choice).",
    )
    ebcc_diag_prior: float = Field(
        4.0,
        gt=0.0,
        le=1000.0,
        description="Method ebcc: virtual right answers in each worker's answer distribution for every class "
        "and subtype (the authors' 4).",
    )
    ebcc_off_diag_prior: float = Field(
        1.0,
        gt=0.0,
        le=1000.0,
        description="Method ebcc: virtual answers of each wrong label in the same distributions (the authors' 1).",
    )
    ebcc_tol: float = Field(
        1e-6,
        ge=1e-15,
        le=1e-2,
        description="Method ebcc: a run stops once its evidence lower bound changes by at most this share of "
        "its size in one sweep.",
    )
    ebcc_max_iter: int = Field(
        500, ge=1, le=MAX_ITERATIONS, description="Method ebcc: most sweeps of each run (the authors' 500)."
    )
    ebcc_restarts: int = Field(
        5,
        ge=1,
        le=1000,
        description="Method ebcc: runs from different random starts; the one with the largest evidence lower "
        "bound is kept (the authors keep the best of 40).",
    )
    gold_in_fit: bool = Field(
        False,
        description="Use the known answers (the truth input) in the fit: the gold tasks' labels are fixed to "
        "their answers (methods ds and onecoin_ds; method auto also lets the gold answers choose its model, "
        "see auto_gold_level). The reported accuracy is then cross-fitted: each fold of gold tasks is scored by a "
        "fit, and a choice, that did not see its answers.",
    )
    auto_gold_level: float = Field(
        0.05,
        ge=0.0,
        le=0.5,
        description="Method auto with gold_in_fit: the gold answers replace the held-out likelihood pick by "
        "another candidate only if that candidate gets more gold tasks right and an exact sign test on the gold "
        "tasks only one of the two gets right gives p at most this level divided by the number of alternatives; "
        "0 never lets the gold choose.",
    )
    gold_folds: int = Field(
        5,
        ge=2,
        le=50,
        description="With gold_in_fit: folds of the gold tasks for the cross-fitted accuracy (one extra fit each).",
    )
    tie_break: TieBreak = Field(
        "random",
        description="How a task whose top labels tie is decided: random draws one of them using the seed, "
        "smallest takes the first in label order.",
    )
    seed: int = Field(
        0,
        ge=0,
        description="Seed of the random tie-break and of ebcc's random starts, so that a rerun gives the same labels.",
    )
    duplicates: DuplicatePolicy = Field(
        "error",
        description="What happens when a worker labelled the same task twice: error stops the run, keep_last "
        "or keep_first keeps one of the answers.",
    )
    classes: list[str] | None = Field(
        None,
        description="The full label set: labels outside it fail validation, and every label in it is a "
        "possible answer even if nobody used it.",
    )
    incremental: bool = incremental_field()
    backfill: list[str] = backfill_field()

    @model_validator(mode="before")
    @classmethod
    def _crowdkit_mapping(cls, data: Any) -> Any:
        """``method: {crowdkit: GLAD, params: {n_iter: 50}}`` is ``method: crowdkit:GLAD`` with ``crowdkit_params``;
        a Crowd-Kit class name is matched whatever its case (``crowdkit:glad``)."""
        if not isinstance(data, dict):
            return data
        method = data.get("method")
        if isinstance(method, dict) and set(method) <= {"crowdkit", "params"} and "crowdkit" in method:
            if "crowdkit_params" in data and method.get("params"):
                raise ValueError("give the Crowd-Kit parameters once: in method.params or in crowdkit_params")
            data = {**data, "method": f"{CROWDKIT_PREFIX}{method['crowdkit']}"}
            if method.get("params") is not None:
                data["crowdkit_params"] = method["params"]
            method = data["method"]
        if isinstance(method, str) and method.lower().startswith(CROWDKIT_PREFIX):
            by_lower = {n.lower(): n for n in AGGREGATORS}
            name = by_lower.get(method[len(CROWDKIT_PREFIX) :].strip().lower())
            if name is not None:
                data = {**data, "method": f"{CROWDKIT_PREFIX}{name}"}
        return data

    @field_validator("method")
    @classmethod
    def _crowdkit_installed(cls, v: str) -> str:
        """A Crowd-Kit method on a machine without crowd-kit fails here, before any step (names the extra)."""
        if is_crowdkit(v):
            message = missing_extra(v)
            if message is not None:
                raise ValueError(message)
        return v

    @field_validator("crowdkit_params")
    @classmethod
    def _crowdkit_params(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The parameters checked against the chosen aggregator's (crowdflow/skills/crowdkit_adapter.py), the one
        place their names, defaults and ranges are declared."""
        method = info.data.get("method")
        if method is None:  # the method itself was refused: that error is reported
            return v
        if not is_crowdkit(method):
            if v:
                raise ValueError(f"crowdkit_params apply to a crowdkit: method only, not {method}")
            return v
        return validate_params(method, v)

    @field_validator(*_CHOICES, mode="before")
    @classmethod
    def _known_choice(cls, v: Any, info: ValidationInfo) -> Any:
        choices = _CHOICES[str(info.field_name)]
        if v not in choices:
            raise ValueError(f"unknown {info.field_name} {v!r}; use " + ", ".join(repr(c) for c in choices))
        return v

    @field_validator("auto_candidates", mode="before")
    @classmethod
    def _known_candidates(cls, v: Any) -> Any:
        if v is None:
            return v
        names = get_args(AutoCandidate)
        unknown = [c for c in v if c not in names]
        if unknown or not v:
            raise ValueError(f"unknown auto candidate(s) {unknown}; use " + ", ".join(repr(c) for c in names))
        return list(dict.fromkeys(v))

    @field_validator("classes")
    @classmethod
    def _two_classes(cls, v: list[str] | None) -> list[str] | None:
        """Canonical spellings (``1.0`` is ``1``: the labels rule, crowdflow.labels.canonical_label_text), at
        least two distinct classes, none given twice under two spellings."""
        if v is None:
            return v
        canon = [str(c) for c in canonical_label_text(pd.Series(v, dtype="string"))]
        if len(set(canon)) < 2:
            raise ValueError("a label set needs at least 2 distinct classes")
        if len(set(canon)) < len(canon):
            same = sorted({f"{a!r} = {b!r}" for a, b in zip(v, canon, strict=True) if canon.count(b) > 1})
            raise ValueError("a class is listed twice (numbers are one label however written: " + ", ".join(same) + ")")
        return canon

    @property
    def needs_identifiable_skills(self) -> bool:
        """Whether the method estimates rank-one skills, which a bipartite worker graph leaves unidentified
        (docs/methods/skills.md §3.1): ``pgd``, and Crowd-Kit's ``MMSR``, which fits the same rank-one model. The
        one place the identifiability rule is decided; the pipeline (``SkillsPipeline.check_modes``) and the front
        door (``crowdflow.skills``) read it."""
        return self.method in ("pgd", "crowdkit:MMSR")

    @property
    def spectral_diagnostics(self) -> bool:
        """Whether the diagnostics table gets its eigenvalues: ``spectral`` when given, else for ``pgd`` only.

        Issue #19: mv at 10^6 labels and 1,000-3,000 workers spent 2-30 s on eigenvalues, 10-100x its vote;
        ds (which kept them by default since issue #24) spent 2-5 s at 1,000 workers and 16 s at 10^7 labels,
        more than its accelerated EM. The eigenvalues describe the rank-one (pgd) fit: its conditioning and
        the Theorem-12 bound (docs/methods/skills.md §3.4)."""
        return self.spectral if self.spectral is not None else self.method == "pgd"

    @model_validator(mode="after")
    def _runnable(self) -> SkillsOptions:
        if self.gold_in_fit and self.method not in GOLD_METHODS:
            raise ValueError(f"gold_in_fit: {gold_refusal(self.method)}")
        if self.solver == "eg" and self.sign_mode != "bfs":
            raise ValueError("solver 'eg' fits positive skills only: use it with sign_mode 'bfs'")
        if self.solver == "scaled" and self.eta is not None:
            raise ValueError(
                "eta is the step of solver 'gd' or 'eg'; solver 'scaled' chooses a step per worker: "
                "leave eta empty or choose solver 'gd'"
            )
        return self
