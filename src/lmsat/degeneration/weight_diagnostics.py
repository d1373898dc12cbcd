"""Weight diagnostics of every linear layer and the LM head, as WeightWatcher and
pico-analyze compute them, from one eigendecomposition per matrix.

    for name, layer, w in linear_weights(model):     # every nn.Linear / Conv1D of every block, then the head
        row = matrix_diagnostics(w)                   # a dict of the columns below

For a matrix W (N x M as stored, n = max, m = min of its sides) the eigenvalues
lambda_1 <= ... <= lambda_m of W^T W (or W W^T, the smaller; float64 Gram on W's device,
lmsat.degeneration.spectra.gram_matrix) are its empirical spectral density (ESD), WeightWatcher's
`evals` (its default: W as stored, not normalised by N; singular values s_i = sqrt(lambda_i)).

WeightWatcher (PyPI `weightwatcher` 0.7.7, `analyze()` defaults):
- alpha: the power-law exponent of the ESD's tail, p(lambda) ~ lambda^-alpha for lambda >=
  xmin, fitted as its `WWFit` does (the `powerlaw` package's method, Clauset, Shalizi and
  Newman 2009): eigenvalues above 1e-5 (its EVALS_THRESH, absolute) sorted; for every
  candidate xmin among them but the largest, the maximum-likelihood exponent of the
  n_tail values >= xmin, alpha = 1 + n_tail / sum(log(lambda_i / xmin)), and the
  Kolmogorov-Smirnov distance D = max_j |F(lambda_j) - j / n_tail| between its CDF
  F(x) = 1 - (x / xmin)^(1 - alpha) and the empirical one (at each point's left: WW's
  form; a candidate with alpha <= 1 gets D = 1); the candidate of least D is kept (the
  first of equals). Below 20 eigenvalues (a toy's d = 16) WW 0.7.7 fits otherwise: only
  tails of at least 8 values, with the bias-corrected 1 + (n_tail - 1) / sum(...) (the whole
  ESD when no tail qualifies); still the least D wins. alpha_sigma = (alpha - 1) /
  sqrt(n_tail) is its standard error, alpha_D the fit quality (smaller is better),
  alpha_xmin and alpha_n the fit range: the tail is lambda >= alpha_xmin, up to the largest
  eigenvalue (no xmax). alpha_D_margin (lmsat's, not WW's) is the next best candidate's D
  minus the chosen one's: the choice of xmin is a discontinuous argmin, and where the margin
  is below the noise of the eigenvalues (a last-bit change in training moves D by ~1e-3) the
  fit may pick another xmin on another CPU and alpha may change by far more than alpha_sigma
  (in the toy suite 78 of 324 matrices change xmin under 1e-3 relative noise on their
  eigenvalues, most of them near initialisation, where the ESD has no power-law tail; only
  17 choose it by a margin of 0.02 or more). WW's heuristics read alpha in [2, 6] as well
  trained, below 2 as over-fitted; with few eigenvalues (a toy's 16 to 128) the fit says
  little, and alpha_n shows how little.
- alpha_weighted = alpha log10(lambda_max); stable_rank = sum(lambda) / lambda_max
  (= ||W||_F^2 / ||W||_2^2).
- mp_softrank = lambda_plus / lambda_max, as its `mp_fit` (analyze(mp_fit=True)): the ESD is
  rescaled to mean 1, a Marchenko-Pastur density of aspect ratio Q = n / m is fitted to a
  linear-kernel density estimate of it (bandwidth 0.1 on 1000 points of [0, max + 0.5],
  points of density < 0.01 left out) by least squares over sigma (a grid of 0.05..2 times
  sqrt(lambda_max) / (1 + Q^-1/2), then Nelder-Mead from its best point), lambda_plus =
  (sigma (1 + Q^-1/2))^2 its bulk edge; square matrices (Q = 1) fit WW's quarter circle to
  the singular values. Near 1: W looks random; near 0: a few large directions dominate.
  mp_sigma is the fitted sigma. mp_softrank_margin (lmsat's, not WW's) is, as alpha_D_margin,
  how decisively the fit's discrete choices were made: the start of the polish (the grid's
  least residual, against the best grid point of another basin of the residual) and the
  density's peak (the KDE's highest grid point: the bulk must cover it, so where the edge of
  the fit sits at it, the peak decides the fit), each as the relative gap to the runner-up that
  could give another fit (the densest other grid point whose use as the peak moves the
  admissible sigmas where the polish goes or its start to another basin); the smaller of the
  two, searched up to MP_SEARCH. A linear-kernel density is flat between its kinks, so its
  peak is often a tie decided by the last bits of the eigenvalues' sum: where the margin is
  below the noise of the eigenvalues, the fit may take the other choice on another CPU, or
  with the same eigenvalues summed in another order, and move by 5 to 400% (in the toy
  suite 3 of 324 matrices change their soft rank when the eigenvalues are summed in another
  order, all with margins below 1e-15; under 1e-3 relative noise on the eigenvalues, those
  with a margin of 0.01 or more moved by at most 2.6%).

pico-analyze (pico-lm/pico-analyze, src/metrics/):
- per: proportional effective rank, exp(H(p)) / m with p_i = s_i / sum(s) (natural log).
- gini: Gini coefficient of |w| over all entries, sum_i (2i - N M - 1) |w|_(i) / (N M sum |w|)
  (sorted ascending, i from 1): 0 for equal magnitudes, (NM - 1) / NM for a single
  non-zero entry (1 in the limit).
- hoyer: (sqrt(NM) - ||w||_1 / ||w||_2) / (sqrt(NM) - 1): 0 for equal magnitudes, 1 for one non-zero.
- condition_number: s_max / s_min (inf for a singular matrix). From the float64 Gram, s_min
  is accurate to about eps (s_max / s_min)^2 relative: condition numbers up to ~1e6 to 1e-4,
  beyond ~1e7 they are noise (lmsat.degeneration.spectra).
- norms: frobenius_norm (sqrt(sum lambda)), spectral_norm (s_max), nuclear_norm (sum s),
  max_abs (max |w|, pico's `inf` norm: torch.norm(W, p=inf) takes every entry).

Documented values, never silent numbers: a matrix with NaN/Inf raises
WeightDiagnosticsError naming it; a zero matrix (W = 0, e.g. a zero-initialised output
projection at step 0) has norms 0 and every scale-free quantity NaN, with status
"zero matrix"; an alpha that cannot be fitted (fewer than 2 eigenvalues above 1e-5, or no
candidate with alpha > 1) is NaN with status "alpha not fitted: ...". Otherwise status is "ok".
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

import h5py
import numpy as np

from lmsat.core.checked_hdf5 import check_bounds, read_checked_hdf5, write_checked_hdf5
from lmsat.core.integrity import CHECKSUM_ATTR, array_sha256, corrupt
from lmsat.core.io import check_identity, promised_by_path

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: mp_softrank_margin
WW_EVALS_THRESHOLD = 1e-5  # WeightWatcher's EVALS_THRESH: eigenvalues at or below it are left out of the alpha fit
SMALL_N, SMALL_N_MIN_TAIL = 20, 8  # WeightWatcher 0.7.7's small-ESD fit: below 20 eigenvalues, tails of >= 8
KDE_BANDWIDTH, KDE_POINTS, KDE_FLOOR = 0.1, 1000, 0.01  # WeightWatcher's mp_fit density estimate
MP_SEARCH = 0.05  # mp_softrank_margin: runners-up are searched up to this relative gap (a larger margin reads as it)
MP_EXPLORED = 0.1  # the sigmas the polish explores: its start and result, widened by this share (fmin's first step is 5%)
MP_NUDGE = 1e-3  # a start moved by this share (the candidates scale with sqrt(lambda_max), which moves ~5e-4 across CPUs)
MP_MOVED = 2e-3  # ... whose polish ends further than this share away ends elsewhere (fmin stops within 1e-4 of sigma)
ALPHA_COLUMNS = ("alpha", "alpha_sigma", "alpha_D", "alpha_D_margin", "alpha_xmin", "alpha_n", "alpha_weighted",
                 "stable_rank", "mp_softrank", "mp_sigma", "mp_softrank_margin", "lambda_max")
SPARSITY_COLUMNS = ("per", "gini", "hoyer", "condition_number", "frobenius_norm", "spectral_norm", "nuclear_norm",
                    "max_abs")
COLUMNS = (*ALPHA_COLUMNS, *SPARSITY_COLUMNS)
SCALE_FREE = ("alpha", "alpha_n", "alpha_sigma", "alpha_D", "alpha_D_margin", "alpha_xmin", "alpha_weighted", "stable_rank",
              "mp_softrank", "mp_sigma", "mp_softrank_margin", "per", "gini", "hoyer", "condition_number")  # NaN for a zero matrix
HEAD = "head"  # the matrix name of the LM head
# column -> (its margin's column, the margin from which it is reproducible on another CPU): alpha's xmin
# chosen by 0.02 in KS distance or more (1.8x the largest change of D under 1e-3 relative noise on the
# eigenvalues, tests/golden_tables.py PEERS_MEASURED); the MP fit's choices by 0.01 or more (10x the relative
# change of the density under that noise; such fits moved by at most 2.6% under it, in the default run's 324).
REPRODUCIBLE = {"alpha": ("alpha_D_margin", 0.02), "mp_softrank": ("mp_softrank_margin", 0.01)}


class WeightDiagnosticsError(ValueError):
    """A weight matrix that cannot be diagnosed (NaN/Inf), or a diagnostics file that is
    unreadable or of another format."""


# ---------------------------------------------------------------- WeightWatcher's fits


@dataclass(frozen=True)
class PowerLawFit:
    alpha: float
    sigma: float  # standard error (alpha - 1) / sqrt(n_tail)
    D: float  # Kolmogorov-Smirnov distance of the fit (WeightWatcher's form)
    D_margin: float  # the next best candidate's D minus this one's: how decisively xmin was chosen
    xmin: float  # the tail's lower end
    n_tail: int  # eigenvalues >= xmin


def fit_power_law(evals, threshold: float = WW_EVALS_THRESHOLD, block: int = 512) -> PowerLawFit | str:
    """WeightWatcher's power-law fit of an ESD (module docstring); a str saying why when
    there is none. Every candidate xmin at once: O(m^2) in blocks of `block` candidates."""
    x = np.sort(np.asarray(evals, dtype=np.float64))
    x = x[x > threshold]  # (N,)
    size = x.size
    if size < 2:
        return f"alpha not fitted: {size} eigenvalue(s) above {threshold:g}"
    logs = np.log(x)
    tail_sums = np.cumsum(logs[::-1])[::-1]  # sum_{j >= i} log x_j
    n = (size - np.arange(size - 1)).astype(np.float64)  # (N-1,) tail size of each candidate
    spread = tail_sums[:-1] - n * logs[:-1]  # sum_{j >= i} log(x_j / x_i)
    if size < SMALL_N:  # WW 0.7.7: bias-corrected, tails of >= SMALL_N_MIN_TAIL values only
        usable = (n >= SMALL_N_MIN_TAIL) & (spread > 1e-12)
        if not usable.any():  # its fallback: the whole ESD as the tail
            usable = np.zeros_like(usable)
            usable[0] = spread[0] > 1e-12
        with np.errstate(divide="ignore", invalid="ignore"):
            alphas = np.where(usable, 1 + (n - 1) / spread, np.nan)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            alphas = np.where(spread > 0, 1 + n / spread, np.nan)  # equal values: no exponent
    distances = np.ones(size - 1)
    ranks = np.arange(size)
    for lo in range(0, size - 1, block):
        rows = np.arange(lo, min(lo + block, size - 1))  # candidate indices
        rows = rows[np.isfinite(alphas[rows]) & (alphas[rows] > 1)]
        if not rows.size:
            continue
        offset = ranks[None, :] - rows[:, None]  # (c, N): j - i
        inside = offset >= 0
        ratio = np.where(inside, logs[None, :] - logs[rows, None], 0.0)
        model = 1 - np.exp((1 - alphas[rows, None]) * ratio)  # the fitted CDF at each x_j
        gap = np.where(inside, np.abs(model - offset / n[rows, None]), 0.0)  # against j / n: WW's empirical CDF
        distances[rows] = gap.max(axis=1)
    if not (distances < 1).any():
        return "alpha not fitted: no candidate xmin gives alpha > 1"
    best = int(np.argmin(distances))
    others = np.delete(distances, best)
    margin = float(others.min() - distances[best]) if others.size else float(1 - distances[best])  # (D = 1: no fit)
    return PowerLawFit(
        alpha=float(alphas[best]), sigma=float((alphas[best] - 1) / np.sqrt(n[best])), D=float(distances[best]),
        D_margin=margin, xmin=float(x[best]), n_tail=int(n[best]),
    )


def linear_kde(points: np.ndarray, grid: np.ndarray, bandwidth: float = KDE_BANDWIDTH) -> np.ndarray:
    """Density at `grid` of a linear (triangular) kernel estimate on `points`, normalised
    as scikit-learn's KernelDensity(kernel="linear"): (1 / (n h)) sum max(0, 1 - |x - p| / h)."""
    density = np.zeros(grid.size)
    for lo in range(0, points.size, 4096):  # (grid, 4096) at a time
        distance = np.abs(grid[:, None] - points[None, lo : lo + 4096]) / bandwidth
        density += np.clip(1 - distance, 0, None).sum(axis=1)
    return density / (points.size * bandwidth)


def _mp_terms(sigma, grid: np.ndarray, density: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sum of squared differences between the MP (or, Q = 1, quarter-circle) density of each
    sigma and the estimate on the grid's points of non-negligible density, the bulk's lower
    and upper edges a, b) as WeightWatcher's resid_mp computes them (the density is 0 off its
    support, where WW's nan_to_num turns its NaN into 0). sigma: (s,) -> 3 x (s,)"""
    sigma = np.atleast_1d(np.asarray(sigma, dtype=np.float64))[:, None]  # (s, 1)
    if q == 1:
        inside = np.clip(4 - grid**2, 0, None)  # WW's form: sigma scales the height only
        model = np.sqrt(inside)[None, :] / (np.pi * sigma**2)  # (s, g)
        return np.square(model - density).sum(axis=1), np.zeros(sigma.shape[0]), np.full(sigma.shape[0], np.nan)
    b = (sigma * (1 + np.sqrt(1 / q))) ** 2  # (s, 1) bulk edges
    a = (sigma * (1 - np.sqrt(1 / q))) ** 2
    support = (b - grid) * (grid - a)  # (s, g), > 0 inside the bulk
    with np.errstate(divide="ignore", invalid="ignore"):
        model = np.where(support > 0, np.sqrt(np.clip(support, 0, None)) / (2 * np.pi * sigma**2 * grid / q), 0.0)
    return np.square(model - density).sum(axis=1), a[:, 0], b[:, 0]


def _mp_penalised(sse: np.ndarray, a: np.ndarray, b: np.ndarray, grid: np.ndarray, peak: float) -> np.ndarray:
    """WW's resid_mp from _mp_terms: 1000 per grid point where the bulk [a, b] misses the
    estimate's peak (the grid point `peak`) or ends past its last point. (s,) -> (s,)"""
    missed = (b < peak) | (b > grid.max()) | (a > peak)  # all False for the quarter circle (b NaN)
    return np.where(missed, 1000.0**2 * grid.size, sse)


def _mp_residual(sigma, grid: np.ndarray, density: np.ndarray, q: float, peak: float) -> np.ndarray:
    """WeightWatcher's resid_mp of each sigma (_mp_terms, _mp_penalised). sigma: (s,) -> (s,)"""
    return _mp_penalised(*_mp_terms(sigma, grid, density, q), grid, peak)


@dataclass(frozen=True)
class MarchenkoPasturFit:
    sigma: float  # fitted scale of the rescaled ESD (mean eigenvalue 1)
    bulk_max: float  # lambda_plus = (sigma (1 + Q^-1/2))^2, rescaled units
    lambda_max: float  # the largest eigenvalue, rescaled units
    softrank: float  # bulk_max / lambda_max
    margin: float  # how decisively its discrete choices were made (relative gap, at most MP_SEARCH)


def _descent_basins(values: np.ndarray) -> np.ndarray:
    """Per point of a sequence, the local minimum that steps to a strictly lower neighbour reach
    from it (its index): points of one basin polish to the same minimum. # (s,) -> (s,)"""
    index = np.arange(values.size)
    left, right = np.r_[np.inf, values[:-1]], np.r_[values[1:], np.inf]
    # one step to the lower of the two neighbours, where it is lower than here
    target = np.where(np.minimum(left, right) < values, np.where(left <= right, index - 1, index + 1), index)
    for _ in range(values.size):  # follow the steps to their ends
        following = target[target]
        if np.array_equal(following, target):
            break
        target = following
    return target


def _mp_margin(terms, candidates, start: int, sigma: float, polish, grid, density, q: float, peak: int) -> float:
    """mp_softrank_margin (module docstring) of a fit that started its polish at candidates[start]
    with the density's peak at grid[peak] and ended at `sigma`: 0 where the polish (`polish`:
    start -> sigma) ends elsewhere from a start MP_NUDGE away; else the smaller relative gap by
    which the start (against the best candidate of another basin of the residual) and the peak
    (against the densest other grid point that, as the peak, moves the edges of the admissible
    sigmas into those the polish explores, or the start to another basin) were chosen, at most
    MP_SEARCH. terms: _mp_terms of the candidates."""
    if any(abs(polish(candidates[start] * shift) - sigma) > MP_MOVED * sigma for shift in (1 - MP_NUDGE, 1 + MP_NUDGE)):
        return 0.0  # the polish's own path decides: the noise of the eigenvalues moves its start by about that
    residuals = _mp_penalised(*terms, grid, grid[peak])
    basins = _descent_basins(residuals)
    others = residuals[basins != basins[start]]
    margin = min(MP_SEARCH, float((others.min() - residuals[start]) / residuals[start])) if others.size else MP_SEARCH
    if q == 1:  # the quarter circle's residual does not read the peak
        return margin
    lo, hi = (1 - MP_EXPLORED) * min(candidates[start], sigma), (1 + MP_EXPLORED) * max(candidates[start], sigma)
    r = 1 / np.sqrt(q)
    chosen = np.sqrt(grid[peak]) / np.array([1 + r, 1 - r])  # the sigmas whose bulk covers the peak: a <= peak <= b
    for j in np.argsort(-density, kind="stable"):
        gap = float((density[peak] - density[j]) / density[peak])
        if gap >= margin:
            break
        if j == peak:
            continue
        edges = np.sqrt(grid[j]) / np.array([1 + r, 1 - r])
        crosses = ((np.minimum(edges, chosen) < hi) & (np.maximum(edges, chosen) > lo) & (edges != chosen)).any()
        if crosses or basins[int(np.argmin(_mp_penalised(*terms, grid, grid[j])))] != basins[start]:
            return gap
    return margin


def fit_marchenko_pastur(evals, n: int, m: int) -> MarchenkoPasturFit:
    """WeightWatcher's mp_fit of the m eigenvalues of an n x m matrix's ESD (module docstring),
    with the margin of its discrete choices (_mp_margin)."""
    from scipy import optimize

    q = n / m
    x = np.asarray(evals, dtype=np.float64)
    x = x * (x.size / x.sum())  # mean 1 (WW: Wscale^2 = m / sum(lambda))
    fitted = np.sqrt(x) if q == 1 else x
    grid = np.linspace(0, fitted.max() + 0.5, KDE_POINTS)
    density = linear_kde(fitted, grid)
    keep = density > KDE_FLOOR  # the points WW's residual uses (the others add 0)
    grid, density = grid[keep], density[keep]
    scale = np.sqrt(x.max()) / (1 + 1 / np.sqrt(q))  # WW's calc_sigma on the rescaled eigenvalues
    candidates = np.arange(0.05 * scale, 2.0 * scale, 0.01 * scale)  # scipy.optimize.brute's grid of a slice
    peak = int(np.argmax(density))
    terms = _mp_terms(candidates, grid, density, q)
    start = int(np.argmin(_mp_penalised(*terms, grid, grid[peak])))

    def polish(first: float) -> float:  # brute's default finish, from the grid's best
        return float(optimize.fmin(lambda s: float(_mp_residual(s, grid, density, q, grid[peak])[0]), np.array([first]),
                                   disp=False)[0])

    sigma = polish(candidates[start])
    bulk_max = (sigma * (1 + 1 / np.sqrt(q))) ** 2
    return MarchenkoPasturFit(sigma=sigma, bulk_max=float(bulk_max), lambda_max=float(x.max()),
                              softrank=float(bulk_max / x.max()),
                              margin=_mp_margin(terms, candidates, start, sigma, polish, grid, density, q, peak))


# ---------------------------------------------------------------- one matrix


def eigenvalues(w) -> np.ndarray:
    """Eigenvalues of W^T W or W W^T (the smaller), float64, ascending, >= 0, from the Gram on
    W's device; WeightDiagnosticsError if W holds NaN/Inf. # (m,)"""
    import torch

    from lmsat.degeneration.spectra import gram_matrix

    w = w.detach()
    tall = w if w.shape[0] >= w.shape[1] else w.T  # (n, m)
    try:
        gram = gram_matrix(tall)  # (m, m) float64
    except ValueError as error:  # NaN/Inf (matrix_diagnostics names the entry first)
        raise WeightDiagnosticsError(str(error)) from None
    return np.clip(torch.linalg.eigvalsh(gram).cpu().numpy(), 0.0, None)


def _half_statistics(w) -> tuple[float, float, float, float]:
    """(sum_i (2i - n - 1) |w|_(i), sum |w|, sum w^2, max |w|) of a float16 / bfloat16 matrix,
    exactly, from the count of each of its at most 32,768 magnitudes: the 15 low bits of a
    non-negative 16-bit float order its values, and a run of c equal values from rank r + 1
    on contributes v c (2r + c - n). O(n), no sort."""
    import torch

    bits = (w.detach().reshape(-1).view(torch.int16).to(torch.int32) & 0x7FFF).long()  # |w|'s bit pattern
    counts = torch.bincount(bits, minlength=32768).cpu().numpy().astype(np.float64)  # (32768,)
    patterns = torch.arange(32768, dtype=torch.int32).to(torch.int16)
    if w.dtype == torch.float16:
        values = patterns.view(torch.float16).double().numpy()
    else:  # bfloat16: the high half of a float32
        values = (patterns.to(torch.int32) << 16).view(torch.float32).double().numpy()
    size = counts.sum()
    below = np.cumsum(counts) - counts  # values ranked before each magnitude
    present = np.flatnonzero(counts)  # (the patterns of inf and NaN never are: eigenvalues() refused them)
    values, counts, below = values[present], counts[present], below[present]
    ranked = float((values * counts * (2 * below + counts - size)).sum())
    return ranked, float((counts * values).sum()), float((counts * values**2).sum()), float(values[-1])


def _sorted_statistics(w, chunk: int) -> tuple[float, float, float, float]:
    """The same sums as _half_statistics for any other dtype, from |w| sorted in its own dtype
    (the order of the stored values is exact; sums in float64, no N x M float64 copy)."""
    import torch

    magnitudes = w.detach().reshape(-1).abs()
    size = magnitudes.numel()
    if magnitudes.device.type == "cpu":  # numpy's vectorised sort is several times torch's on a CPU
        ordered = np.sort(magnitudes.numpy() if magnitudes.dtype in (torch.float32, torch.float64)
                          else magnitudes.float().numpy())  # (exact)
        as_float64 = lambda part: part.astype(np.float64)  # noqa: E731
        arange = lambda lo, hi, like: np.arange(lo, hi, dtype=np.float64)  # noqa: E731
    else:
        ordered = torch.sort(magnitudes).values
        as_float64 = lambda part: part.to(torch.float64)  # noqa: E731
        arange = lambda lo, hi, like: torch.arange(lo, hi, dtype=torch.float64, device=like.device)  # noqa: E731
    total = ranked = square = 0.0
    for lo in range(0, size, chunk):
        part = as_float64(ordered[lo : lo + chunk])
        index = arange(lo + 1, lo + 1 + part.shape[0], part)
        total += float(part.sum())
        ranked += float(((2 * index - size - 1) * part).sum())
        square += float((part * part).sum())
    return ranked, total, square, float(ordered[-1])


def entry_statistics(w, chunk: int = 2**24) -> dict[str, float]:
    """pico-analyze's Gini and Hoyer of |w| over every entry, and max |w|, on W's device."""
    import torch

    size = w.numel()
    if w.dtype in (torch.float16, torch.bfloat16):
        ranked, total, square, largest = _half_statistics(w)
    else:
        ranked, total, square, largest = _sorted_statistics(w, chunk)
    if total == 0:
        return dict(gini=math.nan, hoyer=math.nan, max_abs=0.0)
    root = math.sqrt(size)
    hoyer = (root - total / math.sqrt(square)) / (root - 1) if size > 1 else math.nan
    return dict(gini=ranked / (size * total), hoyer=hoyer, max_abs=largest)


def spectral_diagnostics(evals: np.ndarray, n: int, m: int) -> tuple[dict[str, float], str]:
    """Every quantity of the module docstring that the ESD gives, and the status."""
    lam = np.asarray(evals, dtype=np.float64)  # (m,) ascending
    top = float(lam[-1])
    row = {name: math.nan for name in COLUMNS if name not in ("gini", "hoyer", "max_abs")}
    row.update(frobenius_norm=float(np.sqrt(lam.sum())), spectral_norm=float(np.sqrt(top)),
               nuclear_norm=float(np.sqrt(lam).sum()), lambda_max=top, alpha_n=math.nan)
    if top == 0:
        return row, "zero matrix"
    s = np.sqrt(lam)
    p = s[s > 0] / s.sum()
    row.update(
        stable_rank=float(lam.sum() / top),
        per=float(np.exp(-(p * np.log(p)).sum()) / m),
        condition_number=float(s[-1] / s[0]) if s[0] > 0 else math.inf,
    )
    marchenko = fit_marchenko_pastur(lam, n, m)
    row.update(mp_softrank=marchenko.softrank, mp_sigma=marchenko.sigma, mp_softrank_margin=marchenko.margin)
    fit = fit_power_law(lam)
    if isinstance(fit, str):
        return row, fit
    row.update(alpha=fit.alpha, alpha_sigma=fit.sigma, alpha_D=fit.D, alpha_D_margin=fit.D_margin, alpha_xmin=fit.xmin,
               alpha_n=float(fit.n_tail),
               alpha_weighted=fit.alpha * math.log10(top))
    return row, "ok"


def matrix_diagnostics(w, name: str = "W") -> dict:
    """Every column of the module docstring for one weight matrix (a 2-D torch tensor on any
    device, any dtype), plus rows, cols and status. WeightDiagnosticsError for NaN/Inf."""
    import torch

    if w.dim() != 2:
        raise WeightDiagnosticsError(f"{name} has shape {tuple(w.shape)}, not a matrix")
    try:
        lam = eigenvalues(w)  # a NaN/Inf entry reaches the Gram's diagonal
    except WeightDiagnosticsError:
        row, col = (int(i) for i in (~torch.isfinite(w)).nonzero()[0])
        raise WeightDiagnosticsError(f"{name} {tuple(w.shape)} has NaN/Inf (first at row {row}, column {col}): "
                                     "the checkpoint is broken") from None
    n, m = max(w.shape), min(w.shape)
    row, status = spectral_diagnostics(lam, n, m)
    entries = entry_statistics(w)
    row.update(entries)
    if status == "zero matrix":
        row.update(gini=math.nan, hoyer=math.nan)
    return dict(rows=int(w.shape[0]), cols=int(w.shape[1]), **row, status=status)


# ---------------------------------------------------------------- every matrix of a model


def linear_weights(model, n_valid_head_rows: int | None = None) -> list[tuple[str, int, object]]:
    """(matrix name within its block, block index, weight) of every nn.Linear and
    transformers Conv1D (GPT-2) in every decoder block, in forward order, then the LM head
    as (HEAD, n_layers, W) with only its first `n_valid_head_rows` rows (vocabulary padding
    dropped, as the head spectrum does; None keeps all). Views, no copy."""
    from torch import nn

    from lmsat.checkpoints.adapters import decoder_layers, lm_head_matrix

    found = []
    blocks = decoder_layers(model)
    for index, block in enumerate(blocks):
        for name, module in block.named_modules():
            if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
                found.append((name, index, module.weight.detach()))
    head = lm_head_matrix(model)  # (V, d)
    found.append((HEAD, len(blocks), head if n_valid_head_rows is None else head[:n_valid_head_rows]))
    return found


def model_diagnostics(model, where: str = "the model", n_valid_head_rows: int | None = None) -> dict[str, np.ndarray]:
    """matrix_diagnostics of every matrix of linear_weights as arrays, one entry per matrix:
    name, layer (block index; the head: n_layers), rows, cols, status and every column."""
    out: dict[str, list] = {key: [] for key in ("name", "layer", "rows", "cols", "status", *COLUMNS)}
    for name, layer, weight in linear_weights(model, n_valid_head_rows):
        label = name if name == HEAD else f"layer {layer} {name}"
        try:
            row = matrix_diagnostics(weight, label)
        except WeightDiagnosticsError as error:
            raise WeightDiagnosticsError(f"{where}: {error}") from None
        out["name"].append(name)
        out["layer"].append(layer)
        for key in ("rows", "cols", "status", *COLUMNS):
            out[key].append(row[key])
    return {
        "name": np.array(out["name"], dtype=object), "status": np.array(out["status"], dtype=object),
        **{key: np.array(out[key], dtype=np.int64) for key in ("layer", "rows", "cols")},
        **{key: np.array(out[key], dtype=np.float64) for key in COLUMNS},
    }


# ---------------------------------------------------------------- the per-checkpoint file

TEXT = ("name", "status")


def write_diagnostics(path, arrays: dict[str, np.ndarray], record: dict) -> None:
    """results/{run}/weight_diagnostics/{model}/{revision}.h5: one dataset per key of
    model_diagnostics (strings UTF-8), the checkpoint's record keys as attributes, checksums."""
    stored = {k: (np.array([str(v).encode() for v in a], dtype=h5py.string_dtype()) if k in TEXT else a)
              for k, a in arrays.items()}
    digests = {k: (np.array([str(v).encode() for v in a]) if k in TEXT else a) for k, a in arrays.items()}
    write_checked_hdf5(path, stored, record, FORMAT_VERSION, digests=digests)


def read_diagnostics(path, check_path: bool = True) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and attributes of a diagnostics file, checked: format, checksums (strings
    hashed as written), made for the model and revision its path names (check_path), and
    NaN only where documented (zero matrix, alpha not fitted)."""
    keys = ("name", "layer", "rows", "cols", "status", *COLUMNS)
    arrays, attrs = read_checked_hdf5(path, keys, FORMAT_VERSION, WeightDiagnosticsError, text=TEXT,
                                      missing=lambda lacking: corrupt(path, f"it lacks datasets {lacking}"))
    recorded = json.loads(attrs[CHECKSUM_ATTR])

    for key in TEXT:  # strings are hashed as the bytes written
        if recorded.get(key, {}).get("sha256") != [array_sha256(np.array([v.encode() for v in arrays[key]]))]:
            raise corrupt(path, f"dataset {key!r} does not match its checksum")
    if check_path:
        check_identity(path, attrs, promised_by_path(path, "model", "revision"))
    zero = arrays["status"] == "zero matrix"
    unfitted = np.array([s.startswith("alpha not fitted") for s in arrays["status"]], dtype=bool)
    for key in COLUMNS:
        values = arrays[key]
        allowed = zero if key in SCALE_FREE else np.zeros_like(zero)
        if key.startswith("alpha"):
            allowed = allowed | unfitted
        infinite = np.isposinf(values) if key == "condition_number" else np.zeros_like(zero)
        bad = ~(np.isfinite(values) | (np.isnan(values) & allowed) | infinite)
        if bad.any():
            i = int(np.argmax(bad))
            raise corrupt(path, f"`{key}` of {arrays['name'][i]} (layer {arrays['layer'][i]}) is {values[i]} "
                                f"with status {arrays['status'][i]!r}")
    _check_bounds(path, arrays, attrs)
    return arrays, attrs


def _check_bounds(path, arrays: dict, attrs: dict) -> None:
    """Every value within what its quantity can be (module docstring; m = min(rows, cols)):
    IntegrityError naming the file, the dataset, the matrix, the value and the rule."""
    where = f"{attrs.get('model')}@{attrs.get('revision')}"
    labels = [f"{name} (layer {layer})" for name, layer in zip(arrays["name"], arrays["layer"])]
    m = np.minimum(arrays["rows"], arrays["cols"]).astype(np.float64)
    inf = math.inf
    bounds = {  # name: (low, high, why)
        "layer": (0, inf, "a block index"), "rows": (1, inf, "a count"), "cols": (1, inf, "a count"),
        "alpha": (1, inf, "a fitted exponent > 1"), "alpha_sigma": (0, inf, "a standard error"),
        "alpha_D": (0, 1, "a Kolmogorov-Smirnov distance"), "alpha_D_margin": (0, 1, "the next best D minus the least"),
        "alpha_xmin": (WW_EVALS_THRESHOLD, inf, "an eigenvalue above WeightWatcher's threshold"),
        "alpha_n": (2, m, "a tail of 2 to min(rows, cols) eigenvalues"),
        "stable_rank": (1, m, "a stable rank is in [1, min(rows, cols)]"),
        "mp_softrank": (0, inf, "a ratio of eigenvalues"), "lambda_max": (0, inf, "an eigenvalue of W^T W"),
        "per": (1 / m, 1, "exp(entropy) / min(rows, cols) is in [1 / min(rows, cols), 1]"),
        "gini": (0, 1, "a Gini coefficient"), "hoyer": (0, 1, "Hoyer's sparsity"),
        "condition_number": (1, inf, "s_max / s_min >= 1"), "frobenius_norm": (arrays["spectral_norm"], inf,
                                                                                "||W||_F >= ||W||_2"),
        "spectral_norm": (0, inf, "a norm"), "nuclear_norm": (arrays["frobenius_norm"], inf, "||W||_* >= ||W||_F"),
        "max_abs": (0, inf, "a magnitude"),
    }
    for name, (low, high, why) in bounds.items():  # NaN where documented: checked above
        check_bounds(path, where, name, arrays[name], low, high, why, labels=labels, nan=True,
                     posinf=name == "condition_number", tolerance=1e-6)
