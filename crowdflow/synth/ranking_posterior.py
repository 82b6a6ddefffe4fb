"""The Bayes detector of the planted ±1 family: posterior reversal probabilities under the generator's own model.

Crowdflow issue #35 item 4 asks the ±1 outlier rule to come within 0.05 of an oracle that knows the true scores
and the outcome law. No rule that sees only the data can know the scores; the best it can do, in expectation
over the generator, is to rank the rows by ``P(z_k = 1 | data)`` (``z_k``: row k is a planted outlier) computed
under the generator's prior, law and outlier rates, and cut that ranking (docs/methods/ranking.md §8.6). This
module computes those probabilities for a draw of :func:`crowdflow.synth.ranking.planted_instance` with ±1
outcomes, so the benchmark ``benchmarks/ranking_outliers_bayes.py`` can say what any data-only rule can reach.

The model (:class:`PlantedSpec`, in the generator's units, conditional on the pairs and annotators):

* prior ``θ_i ~ N(0, 1)`` independent; gap ``d_k = θ_{i_k} − θ_{j_k}``, link argument ``δ_k = d_k/σ``;
* clean law ``L(y | δ)``: ``pm1_btl`` ``P(+1) = 1/(1 + e^{−δ})``; ``pm1_thurstone`` with tie width ``t``
  ``P(+1) = Φ(δ − t)``, ``P(−1) = Φ(−δ − t)``, ``P(0) = Φ(t − δ) − Φ(−t − δ)``;
* **row reversals** (``frac > 0``): a row whose gap is at least ``outlier_gap·σ`` is planted with probability
  ``ε`` and then reads ``y = −sign(d)``. Summing ``z_k`` out, each row contributes
  ``p(y_k | θ) = (1 − ε_k) L(y_k | δ_k) + ε_k·1[y_k = −sign d_k]`` with ``ε_k = ε·1[|d_k| ≥ gσ]``, and
  ``P(z_k = 1 | θ, y_k) = ε_k·1[y_k = −sign d_k] / p(y_k | θ)``;
* **flipping annotators** (``flipper_frac > 0``): annotator a flips (``f_a = 1``) with probability ρ and then
  reverses each answer with probability ``φ`` (``flip_prob``). Summing ``f_a`` and the per-row flips out, the
  rows of annotator a contribute ``(1 − ρ)∏_k L(y_k) + ρ∏_k[(1 − φ)L(y_k) + φL(−y_k)]``; a row is an outlier
  when it was flipped and now reads against the true order, ``P = ω_a·φL(−y_k)/[(1 − φ)L(y_k) + φL(−y_k)]
  ·1[y_k = −sign d_k]`` with ``ω_a = P(f_a = 1 | θ, y)``.

Two simplifications, both named in the benchmark's page: the generator plants a *fixed number* of rows
(``round(frac·m)`` among the eligible ones) and of flippers (``max(1, round(flipper_frac·A))``); here each is
an independent Bernoulli at the same rate (``ε`` = planted / eligible rows of the draw, ``ρ`` = flippers /
annotators). And the band design picks pairs close in the true order, so there the pairs themselves say
something about θ; the posterior here conditions on the pairs as if they were chosen blind to θ (exact for
the uniform and Zipf designs, which are).

The scores are sampled by Hamiltonian Monte Carlo (:func:`sample_chain`: diagonal mass matrix and step size
adapted in warm-up windows, jittered trajectory lengths; the eligibility indicator makes the density jump at
``|d_k| = gσ``, and the leapfrog's position steps refract or reflect there so the energy stays conserved;
optionally replica exchange over tempered likelihoods), the outlier indicators are summed out in every draw
(Rao–Blackwellised), and runs from different starts are compared (split R̂ of the scores, the largest
difference between the runs' reversal probabilities; with replica exchange, each run's thermodynamic
integral). On sparse draws the posterior can have modes the runs do not join (benchmarks/results/
ranking_outliers_bayes.md). :func:`brute_force_posterior` integrates the same density on a grid, for checking
the sampler on a few items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crowdflow.compiled import compiled_kernel
from crowdflow.ranking.laws import Link, law_pvalues
from crowdflow.synth.ranking import PlantedInstance

__all__ = [
    "ChainSummary",
    "GeneratorModel",
    "ReversalPosterior",
    "brute_force_posterior",
    "log_density",
    "reversal_posterior",
    "sample_chain",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@compiled_kernel
def _log_ndtr(x: float) -> tuple[float, float]:
    """``(log Φ(x), φ(x)/Φ(x))``, the second being ``d log Φ/dx``; the asymptotic series below x = −30."""
    if x > -30.0:
        v = 0.5 * math.erfc(-x / math.sqrt(2.0))
        return math.log(v), math.exp(-0.5 * x * x - _LOG_SQRT_2PI) / v
    x2 = x * x
    s = 1.0 - 1.0 / x2 + 3.0 / (x2 * x2) - 15.0 / (x2 * x2 * x2)
    return -0.5 * x2 - _LOG_SQRT_2PI - math.log(-x) + math.log(s), -x / s


@compiled_kernel
def _log_sigmoid(x: float) -> tuple[float, float]:
    """``(log σ(x), σ(−x))``, the second being ``d log σ/dx``."""
    if x > 0.0:
        e = math.exp(-x)
        return -math.log1p(e), e / (1.0 + e)
    e = math.exp(x)
    return x - math.log1p(e), 1.0 / (1.0 + e)


@compiled_kernel
def _log_law(y: float, delta: float, probit: bool, t: float) -> tuple[float, float]:
    """``(log L(y | δ), d log L/dδ)`` of the clean law (logit: no ties; probit: tie width ``t``)."""
    if not probit:
        if y > 0.0:
            return _log_sigmoid(delta)
        lv, dv = _log_sigmoid(-delta)
        return lv, -dv
    if y > 0.0:
        return _log_ndtr(delta - t)
    if y < 0.0:
        lv, dv = _log_ndtr(-delta - t)
        return lv, -dv
    # a tie: L0 = Φ(t − δ) − Φ(−t − δ), symmetric in δ
    u = abs(delta)
    la, _ = _log_ndtr(t - u)
    lb, _ = _log_ndtr(-t - u)
    l0 = la + math.log1p(-math.exp(lb - la))
    # dL0/dδ = φ(−t − δ) − φ(t − δ)
    pa = -0.5 * (t - delta) ** 2 - _LOG_SQRT_2PI
    pb = -0.5 * (-t - delta) ** 2 - _LOG_SQRT_2PI
    return l0, math.exp(pb - l0) - math.exp(pa - l0)


@compiled_kernel
def _logaddexp(a: float, b: float) -> float:
    if a > b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


@compiled_kernel
def _row_f(yk: float, d_state: float, lv: float, eps: float, gap: float) -> float:
    """One row's log density in the row-reversal model: the law's ``lv = log L(y_k | δ_k)`` with the reversal
    share of the side of the boundaries ``d_state`` lies on (module docstring)."""
    if eps > 0.0 and abs(d_state) >= gap:
        if (yk > 0.0 and d_state < 0.0) or (yk < 0.0 and d_state > 0.0):
            return _logaddexp(math.log1p(-eps) + lv, math.log(eps))
        return math.log1p(-eps) + lv
    return lv


@compiled_kernel
def _density(
    theta: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
    ann: np.ndarray,
    par: np.ndarray,
    grad: np.ndarray,
    post: np.ndarray,
    work: np.ndarray,
) -> float:
    """Log likelihood ``log p(y | θ)`` (the prior left out), its gradient into ``grad`` and ``P(outlier_k | θ, y)``
    into ``post``.

    ``par`` = (probit 0/1, tie width t, 1/σ, ε, gap g·σ, ρ, φ, number of annotators); ``work`` holds
    (m, 4) row terms and (A, 2) annotator sums for the flipper model.
    """
    probit = par[0] > 0.5
    t, inv_s, eps, gap, rho, phi = par[1], par[2], par[3], par[4], par[5], par[6]
    n_ann = int(par[7])
    m = y.size
    lp = 0.0
    for a in range(theta.size):
        grad[a] = 0.0
    if rho <= 0.0:
        for k in range(m):
            d = theta[i[k]] - theta[j[k]]
            lv, dv = _log_law(y[k], d * inv_s, probit, t)
            f = _row_f(y[k], d, lv, eps, gap)
            lp += f
            post[k] = 0.0
            if eps > 0.0 and abs(d) >= gap and ((y[k] > 0.0 and d < 0.0) or (y[k] < 0.0 and d > 0.0)):
                r = math.exp(math.log(eps) - f)
                post[k] = r
                dv *= 1.0 - r
            grad[i[k]] += dv * inv_s
            grad[j[k]] -= dv * inv_s
        return lp
    # flipping annotators: per-row terms, then per-annotator mixtures
    lphi, l1phi = math.log(phi), math.log1p(-phi)
    sums = work[m:]
    for a in range(n_ann):
        sums[a, 0] = 0.0
        sums[a, 1] = 0.0
    for k in range(m):
        delta = (theta[i[k]] - theta[j[k]]) * inv_s
        lv, dv = _log_law(y[k], delta, probit, t)
        lr, dr = _log_law(-y[k], delta, probit, t)
        lf = _logaddexp(l1phi + lv, lphi + lr)
        c = math.exp(lphi + lr - lf)  # P(flipped | annotator flips, θ, y_k)
        work[k, 0] = dv
        work[k, 1] = (1.0 - c) * dv + c * dr  # d/dδ of log[(1 − φ)L(y) + φL(−y)]
        work[k, 2] = c
        sums[ann[k], 0] += lv
        sums[ann[k], 1] += lf
    lrho, l1rho = math.log(rho), math.log1p(-rho)
    for a in range(n_ann):
        tot = _logaddexp(l1rho + sums[a, 0], lrho + sums[a, 1])
        lp += tot
        sums[a, 0] = math.exp(lrho + sums[a, 1] - tot)  # ω_a
    for k in range(m):
        om = sums[ann[k], 0]
        d = theta[i[k]] - theta[j[k]]
        dl = ((1.0 - om) * work[k, 0] + om * work[k, 1]) * inv_s
        grad[i[k]] += dl
        grad[j[k]] -= dl
        against = (y[k] > 0.0 and d < 0.0) or (y[k] < 0.0 and d > 0.0)
        post[k] = om * work[k, 2] if against else 0.0
    return lp


@compiled_kernel
def _drift(
    theta: np.ndarray,
    mom: np.ndarray,
    minv: np.ndarray,
    span: float,
    beta: float,
    i: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
    par: np.ndarray,
    grp: np.ndarray,
) -> int:
    """Move θ along ``minv·mom`` for time ``span``, refracting or reflecting at the density's jumps.

    The row-reversal model's density jumps where a row's gap crosses ``±gσ`` (or 0 when g = 0). At each crossing
    the momentum's component normal to the boundary ``d_k = b`` (in the mass matrix's metric) pays the potential
    step ``ΔU = −β(f_after − f_before)``: it shrinks to ``√(s² − 2ΔU)`` if it can, else it is reversed
    (Afshar & Domke 2015, "Reflection, refraction, and Hamiltonian Monte Carlo"; volume preserving and
    reversible, so the Metropolis step stays exact). Rows of one pair (either orientation) share their
    boundaries and cross together: ``grp`` = (row's group, rows by group, group pointers), only a group's first
    row is searched and the step is summed over the group. Returns the number of crossings.
    """
    m = y.size
    g_of, g_rows, g_ptr = grp[:m], grp[m : 2 * m], grp[2 * m :]
    probit = par[0] > 0.5
    t, inv_s, eps, gap = par[1], par[2], par[3], par[4]
    crossings = 0
    left = span
    while True:
        best, kb, bb = left, -1, 0.0
        if eps > 0.0:
            for k in range(m):
                u = minv[i[k]] * mom[i[k]] - minv[j[k]] * mom[j[k]]
                if u == 0.0 or g_rows[g_ptr[g_of[k]]] != k:
                    continue
                d = theta[i[k]] - theta[j[k]]
                for b in (gap, -gap):
                    tc = (b - d) / u
                    if 1e-13 < tc < best:
                        best, kb, bb = tc, k, b
                    if gap == 0.0:
                        break
        for a in range(theta.size):
            theta[a] += best * minv[a] * mom[a]
        if kb < 0:
            return crossings
        crossings += 1
        left -= best
        a, c = i[kb], j[kb]
        u = minv[a] * mom[a] - minv[c] * mom[c]
        h = 1e-9 * max(1.0, abs(bb))
        du = 0.0
        for q in range(g_ptr[g_of[kb]], g_ptr[g_of[kb] + 1]):
            r = g_rows[q]
            sg = 1.0 if i[r] == a else -1.0
            lv, _ = _log_law(y[r], sg * bb * inv_s, probit, t)
            after = _row_f(y[r], sg * bb + math.copysign(h, sg * u), lv, eps, gap)
            du -= beta * (after - _row_f(y[r], sg * bb - math.copysign(h, sg * u), lv, eps, gap))
        nrm = math.sqrt(minv[a] + minv[c])
        s = u / nrm
        if s * s > 2.0 * du:
            s_new = math.copysign(math.sqrt(s * s - 2.0 * du), s)
        else:
            s_new = -s
        mom[a] += (s_new - s) / nrm
        mom[c] -= (s_new - s) / nrm


@compiled_kernel
def _trajectory(
    theta: np.ndarray,
    mom: np.ndarray,
    glik: np.ndarray,
    minv: np.ndarray,
    step: float,
    n_steps: int,
    beta: float,
    i: np.ndarray,
    j: np.ndarray,
    y: np.ndarray,
    ann: np.ndarray,
    par: np.ndarray,
    grp: np.ndarray,
    post: np.ndarray,
    work: np.ndarray,
) -> float:
    """``n_steps`` leapfrog steps of the density ``N(θ; 0, I)·p(y | θ)^β`` from (θ, momentum, likelihood gradient)
    in place, with :func:`_drift` for the position updates; returns the end point's log likelihood."""
    lik = 0.0
    for _ in range(n_steps):
        for a in range(theta.size):
            mom[a] += 0.5 * step * (beta * glik[a] - theta[a])
        _drift(theta, mom, minv, step, beta, i, j, y, par, grp)
        lik = _density(theta, i, j, y, ann, par, glik, post, work)
        for a in range(theta.size):
            mom[a] += 0.5 * step * (beta * glik[a] - theta[a])
    return lik


@dataclass(frozen=True)
class GeneratorModel:
    """The generator's model of one ±1 draw (module docstring), in its own units.

    Attributes
    ----------
    probit : bool
        Thurstone (probit) law; else Bradley–Terry (logit).
    tie_width : float
        ``t`` in the probit's units (0: no ties).
    sigma : float
        Noise level σ (``δ = d/σ``).
    eps : float
        Row reversal rate among eligible rows (0: none planted).
    gap : float
        Eligibility threshold ``outlier_gap·σ`` on ``|d|``.
    rho : float
        Share of flipping annotators (0: none).
    flip_prob : float
        ``φ``, a flipper's per-answer reversal probability.
    """

    probit: bool
    tie_width: float
    sigma: float
    eps: float = 0.0
    gap: float = 0.0
    rho: float = 0.0
    flip_prob: float = 0.8

    @classmethod
    def of(cls, inst: PlantedInstance) -> GeneratorModel:
        """The model of a ±1 draw with its realised rates: ``ε`` = planted rows / eligible rows (eligible under
        the true scores), ``ρ`` = flippers / annotators. Both are facts of the generator no real rule has."""
        spec, g = inst.spec, inst.graph
        if not spec.outcome.startswith("pm1"):
            raise ValueError("the Bayes detector covers ±1 outcomes only")
        if spec.frac > 0 and spec.flipper_frac > 0:
            raise ValueError("row reversals and flipping annotators together are not modelled")
        probit = spec.outcome == "pm1_thurstone"
        d = inst.theta[g.i] - inst.theta[g.j]
        gap = float(spec.outlier_gap) * float(spec.sigma)
        eps = 0.0
        if spec.frac > 0:
            eligible = int(np.sum(np.abs(d) >= gap))
            eps = min(round(spec.frac * g.m), eligible) / max(eligible, 1)
        rho = float(np.mean(inst.flipper)) if spec.flipper_frac > 0 else 0.0
        return cls(
            probit=probit,
            tie_width=float(spec.tie_width) if probit else 0.0,
            sigma=float(spec.sigma),
            eps=float(eps),
            gap=gap,
            rho=rho,
            flip_prob=float(spec.flip_prob),
        )

    def params(self, n_annotators: int) -> np.ndarray:
        """The kernel's parameter vector."""
        return np.array(
            [
                float(self.probit),
                self.tie_width,
                1.0 / self.sigma,
                self.eps,
                self.gap,
                self.rho,
                self.flip_prob,
                float(n_annotators),
            ]
        )


def _arrays(inst: PlantedInstance) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    g = inst.graph
    if g.has_annotator:
        _, ann = np.unique(np.asarray(g.annotator).astype(str), return_inverse=True)
    else:
        ann = np.zeros(g.m, dtype=np.int64)
    n_ann = int(ann.max()) + 1 if ann.size else 1
    return (
        np.ascontiguousarray(g.i, dtype=np.int64),
        np.ascontiguousarray(g.j, dtype=np.int64),
        np.ascontiguousarray(np.sign(g.y), dtype=np.float64),
        np.ascontiguousarray(ann, dtype=np.int64),
        n_ann,
    )


def _pair_groups(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """Rows grouped by unordered pair, for :func:`_drift`: (row's group, rows by group, group pointers) in one array."""
    key = np.minimum(i, j) * n + np.maximum(i, j)
    uniq, g_of = np.unique(key, return_inverse=True)
    rows = np.argsort(g_of, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(g_of, minlength=uniq.size))])
    return np.ascontiguousarray(np.concatenate([g_of, rows, ptr]), dtype=np.int64)


def log_density(
    inst: PlantedInstance, model: GeneratorModel, theta: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Log posterior density of ``theta`` (up to a constant), its gradient and ``P(outlier_k | θ, y)`` per row."""
    i, j, y, ann, n_ann = _arrays(inst)
    th = np.asarray(theta, dtype=np.float64)
    grad, post = np.zeros(th.size), np.zeros(y.size)
    work = np.zeros((y.size + n_ann, 4))
    lik = _density(th, i, j, y, ann, model.params(n_ann), grad, post, work)
    return float(lik - 0.5 * th @ th), grad - th, post


@dataclass(frozen=True)
class ChainSummary:
    """One replica-exchange HMC run (its β = 1 replica).

    Attributes
    ----------
    post : numpy.ndarray
        (m,) Rao–Blackwellised ``P(outlier_k | data)``: the mean over draws of ``P(outlier_k | θ, y)``.
    pval : numpy.ndarray
        (m,) posterior mean of the clean law's p-value at the draw's gaps (the oracle's p-value with the
        posterior in place of the true scores; :func:`crowdflow.ranking.laws.law_pvalues`).
    theta : numpy.ndarray
        (draws, n) the sampled scores.
    logp : numpy.ndarray
        (draws,) log posterior density of each draw (up to a constant).
    accept : float
        Mean acceptance probability of the β = 1 replica after warm-up.
    swap : numpy.ndarray
        (K − 1,) acceptance rate of the swaps between neighbouring temperatures after warm-up.
    betas : numpy.ndarray
        (K,) the inverse temperatures.
    lik_mean : numpy.ndarray
        (K,) mean log likelihood ``E_β[log p(y | θ)]`` of each replica after warm-up (for thermodynamic
        integration, :attr:`ReversalPosterior.log_mass`).
    step : float
        Step size of the β = 1 replica after warm-up (in the mass matrix's units).
    leapfrogs : int
        Leapfrog steps over all replicas, warm-up included.
    """

    post: np.ndarray
    pval: np.ndarray
    theta: np.ndarray
    logp: np.ndarray
    accept: float
    swap: np.ndarray
    betas: np.ndarray
    lik_mean: np.ndarray
    step: float
    leapfrogs: int


class _Replica:
    """State and warm-up of one temperature: θ, likelihood and its gradient, mass matrix, step size."""

    def __init__(self, theta: np.ndarray, beta: float, lik: float, glik: np.ndarray, warmup: int) -> None:
        self.theta, self.beta, self.lik, self.glik = theta, beta, lik, glik
        n = theta.size
        self.minv = np.ones(n)
        self.step = 0.1 / math.sqrt(n)
        self.ends = sorted({int(warmup * f) for f in (0.15, 0.35, 0.75, 0.95)})
        self.win_start = int(warmup * 0.075)
        self.win: list[np.ndarray] = []
        self._restart()

    def _restart(self) -> None:
        self.mu, self.hbar, self.logeb, self.t = math.log(10 * self.step), 0.0, 0.0, 0

    def adapt(self, it: int, acc: float, warmup: int) -> None:
        """Dual averaging of the step size; the mass matrix at the windows' ends (see :func:`sample_chain`)."""
        self.t += 1
        self.hbar = (1 - 1 / (self.t + 10)) * self.hbar + (0.8 - acc) / (self.t + 10)
        logstep = self.mu - math.sqrt(self.t) / 0.05 * self.hbar
        eta = self.t**-0.75
        self.logeb = eta * logstep + (1 - eta) * self.logeb
        self.step = math.exp(logstep)
        if it >= self.win_start:
            self.win.append(self.theta.copy())
        if it + 1 in self.ends and len(self.win) > 10:
            arr = np.asarray(self.win)
            k = arr.shape[0]
            self.minv = (k / (k + 5.0)) * arr.var(axis=0) + 1e-3 * 5.0 / (k + 5.0)
            self.win = []
            self._restart()
        if it + 1 == warmup:
            self.step = math.exp(self.logeb)


def sample_chain(
    inst: PlantedInstance,
    model: GeneratorModel,
    *,
    init: np.ndarray,
    seed: int,
    warmup: int = 1000,
    draws: int = 1000,
    betas: tuple[float, ...] = (1.0,),
    length: float = 2.0,
    max_steps: int = 256,
) -> ChainSummary:
    """Replica-exchange HMC on the scores with the reversal indicators summed out (module docstring).

    One replica per ``β`` in ``betas`` (``betas[0]`` = 1, decreasing) samples ``N(θ; 0, I)·p(y | θ)^β``; after
    every HMC transition neighbouring replicas propose to swap states, accepted with probability
    ``min(1, exp((β_a − β_b)(ℓ_b − ℓ_a)))`` (ℓ the log likelihood), which lets the β = 1 replica leave a mode
    through the flatter ones (Geyer 1991; Earl & Deem 2005). Each replica's warm-up: step size by dual averaging
    towards acceptance 0.8 (Hoffman & Gelman 2014, §3.2); the diagonal inverse mass matrix set to its draws'
    variances (shrunk towards 10⁻³ as Stan does) at 15 %, 35 %, 75 % and 95 % of the warm-up, the averaging
    restarted after each. Trajectories of ``U(0.5, 1.5)·length`` in the scaled units, at most ``max_steps``
    leapfrog steps, position updates through :func:`_drift` (refraction at the density's jumps).
    """
    rng = np.random.default_rng(seed)
    i, j, y, ann, n_ann = _arrays(inst)
    par = model.params(n_ann)
    grp = _pair_groups(i, j, int(inst.graph.n))
    n, m = int(inst.graph.n), y.size
    post, work = np.zeros(m), np.zeros((m + n_ann, 4))
    reps = []
    for b in betas:
        th = np.array(init, dtype=np.float64)
        gl = np.zeros(n)
        lik = _density(th, i, j, y, ann, par, gl, post, work)
        reps.append(_Replica(th, b, lik, gl, warmup))
    keep_theta, keep_lp = np.zeros((draws, n)), np.zeros(draws)
    post_sum, pval_sum = np.zeros(m), np.zeros(m)
    link: Link = "probit" if model.probit else "logit"
    acc_sum, leapfrogs = 0.0, 0
    swaps, tries = np.zeros(max(len(betas) - 1, 0)), np.zeros(max(len(betas) - 1, 0))
    lik_sum = np.zeros(len(betas))
    for it in range(warmup + draws):
        for r in reps:
            mom = rng.standard_normal(n) / np.sqrt(r.minv)
            h0 = r.beta * r.lik - 0.5 * float(r.theta @ r.theta) - 0.5 * float(np.sum(r.minv * mom * mom))
            n_steps = min(max_steps, max(1, math.ceil(rng.uniform(0.5, 1.5) * length / r.step)))
            th1, g1 = r.theta.copy(), r.glik.copy()
            lik1 = _trajectory(th1, mom, g1, r.minv, r.step, n_steps, r.beta, i, j, y, ann, par, grp, post, work)
            leapfrogs += n_steps
            h1 = r.beta * lik1 - 0.5 * float(th1 @ th1) - 0.5 * float(np.sum(r.minv * mom * mom))
            acc = math.exp(min(0.0, h1 - h0)) if np.isfinite(h1) else 0.0
            if rng.random() < acc:
                r.theta, r.glik, r.lik = th1, g1, lik1
            if it < warmup:
                r.adapt(it, acc, warmup)
            elif r.beta == 1.0:
                acc_sum += acc
        for k in range(it % 2, len(reps) - 1, 2):
            lo, hi = reps[k], reps[k + 1]
            pr = math.exp(min(0.0, (lo.beta - hi.beta) * (hi.lik - lo.lik)))
            if it >= warmup:
                tries[k] += 1
                swaps[k] += pr
            if rng.random() < pr:
                lo.theta, hi.theta = hi.theta, lo.theta
                lo.lik, hi.lik = hi.lik, lo.lik
                lo.glik, hi.glik = hi.glik, lo.glik
        if it >= warmup:
            lik_sum += [r.lik for r in reps]
            top = reps[0]
            lik = _density(top.theta, i, j, y, ann, par, np.zeros(n), post, work)
            s = it - warmup
            keep_theta[s] = top.theta
            keep_lp[s] = lik - 0.5 * float(top.theta @ top.theta)
            post_sum += post
            pval_sum += law_pvalues(y, (top.theta[i] - top.theta[j]) / model.sigma, model.tie_width, link)
    return ChainSummary(
        post_sum / max(draws, 1),
        pval_sum / max(draws, 1),
        keep_theta,
        keep_lp,
        acc_sum / max(draws, 1),
        swaps / np.maximum(tries, 1),
        np.asarray(betas, dtype=float),
        lik_sum / max(draws, 1),
        reps[0].step,
        leapfrogs,
    )


@dataclass(frozen=True)
class ReversalPosterior:
    """``P(outlier_k | data)`` of a draw from several chains, with their agreement.

    Attributes
    ----------
    post : numpy.ndarray
        (m,) the chains' mean.
    pval : numpy.ndarray
        (m,) the chains' mean posterior p-value (:class:`ChainSummary`).
    chains : list of ChainSummary
    rhat_max : float
        Largest split R̂ (Gelman et al. 2013, §11.4) over the scores and the log density.
    post_diff_max : float
        Largest difference between two chains' ``P(outlier_k | data)`` over the rows.
    log_mass : numpy.ndarray
        (chains,) ``∫_{β_min}^1 E_β[log p(y | θ)] dβ`` along each chain's ladder (trapezoids; NaN with one
        temperature): thermodynamic integration of ``log Z(1) − log Z(β_min)``. When the chains agree at
        ``β_min`` but sit in different modes at β = 1, the difference estimates the log ratio of the modes'
        posterior masses (each chain integrates along its own branch).
    post_weighted : numpy.ndarray
        (m,) the chains' ``P(outlier_k | data)`` weighted by ``exp(log_mass)`` (equal weights without it).
    """

    post: np.ndarray
    pval: np.ndarray
    chains: list[ChainSummary]
    rhat_max: float
    post_diff_max: float
    log_mass: np.ndarray
    post_weighted: np.ndarray


def split_rhat(x: np.ndarray) -> np.ndarray:
    """Split R̂ of (chains, draws, k) samples: each chain cut in halves, between / within variances."""
    c, d = x.shape[0], x.shape[1] // 2
    halves = np.concatenate([x[:, :d], x[:, d : 2 * d]], axis=0)
    w = halves.var(axis=1, ddof=1).mean(axis=0)
    b = d * halves.mean(axis=1).var(axis=0, ddof=1)
    var = (d - 1) / d * w + b / d
    out = np.sqrt(var / np.maximum(w, 1e-300))
    return np.asarray(np.where(w > 0, out, 1.0 if c else np.nan))


def reversal_posterior(
    inst: PlantedInstance,
    model: GeneratorModel | None = None,
    *,
    seed: int = 0,
    warmup: int = 1000,
    draws: int = 1000,
    starts: tuple[str, ...] = ("zero", "truth"),
    betas: tuple[float, ...] = (1.0,),
) -> ReversalPosterior:
    """``P(outlier_k | data)`` under the generator's model from one HMC chain per start.

    ``starts``: ``"zero"`` (θ = 0), ``"prior"`` (a draw from N(0, I)) or ``"truth"`` (the true scores: only a
    start; the chains must agree with the others for the result to stand).
    """
    model = model or GeneratorModel.of(inst)
    rng = np.random.default_rng(seed)
    chains = []
    for c, s in enumerate(starts):
        if s == "zero":
            init = np.zeros(inst.graph.n)
        elif s == "prior":
            init = rng.standard_normal(inst.graph.n)
        elif s == "truth":
            init = np.asarray(inst.theta, dtype=float)
        else:
            raise ValueError(f"unknown start {s!r}")
        chains.append(
            sample_chain(inst, model, init=init, seed=seed * 1000 + c + 1, warmup=warmup, draws=draws, betas=betas)
        )
    post = np.mean([ch.post for ch in chains], axis=0)
    x = np.stack([np.column_stack([ch.theta, ch.logp]) for ch in chains])
    rhat = float(np.nanmax(split_rhat(x)))
    diff = max(
        (float(np.max(np.abs(a.post - b.post))) for k, a in enumerate(chains) for b in chains[k + 1 :]),
        default=0.0,
    )
    pval = np.mean([ch.pval for ch in chains], axis=0)
    log_mass = np.array([_integrate(ch.betas, ch.lik_mean) for ch in chains])
    if np.all(np.isfinite(log_mass)):
        wts = np.exp(log_mass - log_mass.max())
        weighted = np.asarray(np.tensordot(wts / wts.sum(), np.stack([ch.post for ch in chains]), axes=1))
    else:
        weighted = post
    return ReversalPosterior(post, pval, chains, rhat, diff, log_mass, weighted)


def _integrate(betas: np.ndarray, values: np.ndarray) -> float:
    """Trapezoidal ``∫ values dβ`` over the ladder (NaN for a single temperature)."""
    if betas.size < 2:
        return float("nan")
    o = np.argsort(betas)
    b, v = betas[o], values[o]
    return float(np.sum(0.5 * (v[1:] + v[:-1]) * np.diff(b)))


def brute_force_posterior(
    inst: PlantedInstance, model: GeneratorModel, *, half_width: float = 5.0, points: int = 81
) -> np.ndarray:
    """``P(outlier_k | data)`` by summing the same density over a grid of ``points``ⁿ score vectors (n ≤ 4).

    The grid spans ``[−half_width, half_width]`` in every score (the prior's N(0, 1) puts nothing beyond);
    a reference for the sampler on a few items, not for use on real draws.
    """
    n = int(inst.graph.n)
    if n > 4:
        raise ValueError("the grid covers at most 4 items")
    axis = np.linspace(-half_width, half_width, points)
    mesh = np.stack(np.meshgrid(*([axis] * n), indexing="ij"), axis=-1).reshape(-1, n)
    i, j, y, ann, n_ann = _arrays(inst)
    lps, posts = _grid(mesh, i, j, y, ann, model.params(n_ann))
    wts = np.exp(lps - lps.max())
    return np.asarray(wts @ posts / wts.sum())


@compiled_kernel
def _grid(
    mesh: np.ndarray, i: np.ndarray, j: np.ndarray, y: np.ndarray, ann: np.ndarray, par: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Log posterior density and ``P(outlier_k | θ, y)`` at every row of ``mesh``."""
    n_ann = int(par[7])
    m = y.size
    grad, post, work = np.zeros(mesh.shape[1]), np.zeros(m), np.zeros((m + n_ann, 4))
    lps, posts = np.zeros(mesh.shape[0]), np.zeros((mesh.shape[0], m))
    for r in range(mesh.shape[0]):
        th = mesh[r].copy()
        lps[r] = _density(th, i, j, y, ann, par, grad, post, work) - 0.5 * np.sum(th * th)
        posts[r] = post
    return lps, posts
