"""Statistics that decide the paper's claims from the experiments' result tables (numpy/pandas only).

Every test returns an `Interval`: the estimate, its 95 % confidence interval, the test that made it
and the replication units behind it. The unit is always an independently trained model (a seed at
one setting), never a noise draw or a direction: the scatter between seeds is the error, so the
within-run standard errors over noise draws play no part here.

- `slope`: ordinary least squares y = a + b x over the runs, interval of b with t(N - 2) (classical
  standard errors: the seed-to-seed variance is taken to be the same at every x; `error="HC3"`:
  heteroscedasticity-robust, (X'X)^-1 X' diag(e_i^2 / (1 - h_i)^2) X (X'X)^-1, still with t(N - 2));
- `slope_given`: the slope b in x of y = a + b x + c z with a covariate z, t(N - 3);
- `curvature`: y = a + b x + c x^2, interval of c with t(N - 3) (where "linear" is claimed);
- `offset`: y = a + b x + c g with g = 1 for one group, interval of c with t(N - 3): how far one
  group's points lie above the line shared with the others (analysis of covariance);
- `welch`: mean(a) - mean(b) with Welch's standard error and Welch-Satterthwaite degrees of freedom;
- `mean`: a one-sample t interval (paired differences: one value per seed);
- `difference`: the difference of two independent estimates, Welch-Satterthwaite degrees of freedom;
- `correlation`: Pearson's r with Fisher's z interval, tanh(atanh r ± z_0.975 / sqrt(N - 3)), or
  the pooled correlation within groups (a partial correlation given the group);
- `clustered_correlation`: the same r (pooled within groups, or plain), its interval clustered by a
  unit that contributes several points (a function seen at several training-set sizes and as both
  learned and completed): delete-one-cluster jackknife of Fisher's z with t(clusters - 1).

`verdict` applies the one rule of the fidelity page: "reproduced" iff the 95 % interval excludes
zero in the claimed direction, "differs" iff it excludes zero in the other direction, else "not
resolved at this scale" (a claim of no effect, direction 0, can only differ or stay unresolved). `decide` is the
pre-registered rule: a directional claim as `verdict` at its alpha; a flat claim as equivalence
within a margin m: "reproduced" when the 1 - 2 alpha (90 %) interval lies inside ±m, "differs" when
the 1 - alpha (95 %) interval lies wholly outside ±m, else not resolved (`equivalence`).
`Interval.units_needed` is the number of units at which the measured effect and variance would give
an interval that excludes zero; `units_to_resolve` the units that would resolve a claim by its own
rule (for a flat claim: against its margin), and none from 2 degrees of freedom or fewer.
`power_at` is the probability that a planned design finds its smallest effect (`slope_power`,
`mean_power`); `power_with` the power of a measured interval's test at another number of units. `p_value`
is the p value `decide` compares with alpha (a flat claim's: two one-sided tests against its margin), and
`holm` Holm's step-down across a family of them. `t_quantile` inverts Student's t distribution through the
regularized incomplete beta function (continued fraction), so no scipy is needed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

LEVEL = 0.95
"""Confidence level of every interval."""

REPRODUCED, DIFFERS, UNRESOLVED = "reproduced", "differs", "not resolved at this scale"

MAX_UNITS = 100_000
"""`units_needed` gives up (returns None) beyond this many units."""


# ----------------------------------------------------------------------------- distributions


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        even = m * (b - m) * x / ((qam + m2) * (a + m2))
        odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        for numerator in (even, odd):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` > 0 degrees of freedom (df = inf: the normal)."""
    if math.isinf(df):
        return NormalDist().cdf(t)
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` > 0 degrees of freedom (df = inf: the normal), by
    bisection on `t_cdf` to 1e-12 (about 40 evaluations of `betainc`); remembered, since a fidelity
    page asks for the same few (p, df) again and again."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    while high - low > 1e-12 * max(1.0, high):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return 0.5 * (low + high)


# ----------------------------------------------------------------------------- intervals


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95 % interval, and how its precision would grow with more units.

    On the test's own scale (Fisher's z for a correlation, else the estimate's) the estimate is
    `center` with standard error `se` and `df` degrees of freedom. With k units instead of `units`
    the standard error becomes se sqrt((units - offset) / (k - offset)) and the degrees of freedom
    df_per_unit k - df_lost (infinite when `df` is)."""

    estimate: float
    low: float
    high: float
    test: str  # the test and its degrees of freedom, in words
    units: float  # replication units behind it (e.g. seeds per n)
    unit: str  # what one unit is
    center: float
    se: float
    df: float
    df_per_unit: float
    df_lost: float
    offset: float = 0.0
    fisher: bool = False  # centre and se are on Fisher's z scale: the bounds are tanh of theirs

    def bounds(self, level: float = LEVEL) -> tuple[float, float]:
        """The interval at another confidence `level` (e.g. 0.9), from the same centre, se and df."""
        if not 0 < level < 1:
            raise ValueError(f"level must lie in (0, 1), got {level}")
        if not self.df > 0 or not math.isfinite(self.se):
            return math.nan, math.nan
        half = t_quantile(0.5 + level / 2, self.df) * self.se
        low, high = self.center - half, self.center + half
        return (math.tanh(low), math.tanh(high)) if self.fisher else (low, high)

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def _df_at(self, units: float) -> float:
        return math.inf if math.isinf(self.df) else self.df_per_unit * units - self.df_lost

    def units_needed(self, power: float = 0.5) -> int | None:
        """The fewest units k for which the measured effect over its standard error at k units reaches
        t_0.975 + t_power: the interval would exclude zero with probability `power` if the effect and
        the variance are as measured (power 0.5: the expected interval just excludes zero). None when
        the estimate is zero or not finite, or more than MAX_UNITS would be needed."""
        if not 0.5 <= power < 1:
            raise ValueError(f"power must lie in [0.5, 1), got {power}")
        if not math.isfinite(self.center) or self.center == 0:
            return None
        return self.fewest_units(abs(self.center), 0.5 + LEVEL / 2, power)

    def fewest_units(self, distance: float, quantile: float, power: float = 0.5) -> int | None:
        """The fewest units k at which `distance` (on the centre's scale) over the standard error at k
        units reaches t_quantile + t_power; None when the se is not finite and positive, the distance
        not positive, or more than MAX_UNITS would be needed."""
        if not (math.isfinite(distance) and math.isfinite(self.se)) or distance <= 0 or self.se <= 0:
            return None
        ratio = distance / self.se

        def enough(k: int) -> bool:
            df = self._df_at(k)
            if df <= 0 or k <= self.offset:
                return False
            needed = t_quantile(quantile, df) + (t_quantile(power, df) if power > 0.5 else 0.0)
            return ratio * math.sqrt((k - self.offset) / (self.units - self.offset)) >= needed

        low = int(math.floor(self.offset)) + 1
        high = max(low, 2)
        while not enough(high):
            if high > MAX_UNITS:
                return None
            low, high = high, 2 * high
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if enough(middle) else (middle + 1, high)
        return high


def _t_interval(estimate: float, se: float, df: float, test: str, units: float, unit: str,
                df_per_unit: float, df_lost: float) -> Interval:
    if not df > 0 or not math.isfinite(se):
        half = math.nan
    else:
        half = t_quantile(0.5 + LEVEL / 2, df) * se
    return Interval(estimate, estimate - half, estimate + half, test, units, unit, estimate, se, df,
                    df_per_unit, df_lost)


ERRORS = ("classical", "HC3")
"""Standard errors of an OLS coefficient: classical (one residual variance) or HC3 (robust)."""


def _ols(design: np.ndarray, y: np.ndarray, error: str = "classical") -> tuple[np.ndarray, np.ndarray, int]:
    """Coefficients, their covariance matrix (`error`: classical or HC3) and the residual degrees of freedom."""
    if error not in ERRORS:
        raise ValueError(f"error must be one of {', '.join(ERRORS)}, got {error!r}")
    n, p = design.shape
    if n <= p or np.linalg.matrix_rank(design) < p:
        raise ValueError(f"the fit needs more distinct points than its {p} coefficients (got {n} runs)")
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    bread = np.linalg.inv(design.T @ design)
    if error == "classical":
        return coef, residual @ residual / (n - p) * bread, n - p
    leverage = np.einsum("ij,jk,ik->i", design, bread, design)
    if np.any(leverage > 1 - 1e-10):
        raise ValueError("HC3 needs every run's leverage below 1 (the fit passes through a run exactly, e.g. the only "
                         "run at one of two x values)")
    meat = design.T @ (design * (residual / (1 - leverage))[:, None] ** 2)
    return coef, bread @ meat @ bread, n - p


def _arrays(*columns) -> list[np.ndarray]:
    arrays = [np.asarray(c, dtype=float) for c in columns]
    keep = np.all([np.isfinite(a) for a in arrays], axis=0)
    return [a[keep] for a in arrays]


def _error_text(error: str) -> str:
    return "" if error == "classical" else f", {error}"


def _polynomial(x, y, degree: int, unit: str, error: str = "classical") -> Interval:
    x, y = _arrays(x, y)
    design = np.vander(x, degree + 1, increasing=True)
    coef, cov, df = _ols(design, y, error)
    levels = len(np.unique(x))
    name = "slope" if degree == 1 else "quadratic term"
    return _t_interval(float(coef[degree]), float(math.sqrt(cov[degree, degree])), df,
                       f"OLS {name}{_error_text(error)}, t({df})", len(x) / levels, unit, levels, degree + 1)


def slope(x, y, unit: str = "seeds per n", error: str = "classical") -> Interval:
    """OLS slope of y in x over the runs (one value per run), with its t(N - 2) interval; units are
    runs per distinct x (seeds per n); `error`: "classical" or "HC3" standard errors."""
    return _polynomial(x, y, 1, unit, error)


def slope_given(x, y, covariate, unit: str = "seeds per n", error: str = "classical") -> Interval:
    """The slope b in x of y = a + b x + c z (OLS with the covariate z, e.g. the steps since
    convergence), with its t(N - 3) interval; runs missing any of the three are left out."""
    x, y, z = _arrays(x, y, covariate)
    coef, cov, df = _ols(np.column_stack([np.ones_like(x), x, z]), y, error)
    levels = len(np.unique(x))
    return _t_interval(float(coef[1]), float(math.sqrt(cov[1, 1])), df,
                       f"OLS slope given a covariate{_error_text(error)}, t({df})", len(x) / levels, unit, levels, 3)


def curvature(x, y, unit: str = "seeds per n", error: str = "classical") -> Interval:
    """The quadratic coefficient c of y = a + b x + c x^2 (OLS over the runs), with its t(N - 3)
    interval (classical or HC3 standard errors, as `slope`): zero for a straight line."""
    return _polynomial(x, y, 2, unit, error)


def offset(x, y, group, unit: str = "runs") -> Interval:
    """How far the runs with `group` True lie above the line shared with the others: the
    coefficient c of y = a + b x + c group (OLS), with its t(N - 3) interval; units are runs."""
    x, y, g = _arrays(x, y, np.asarray(group, dtype=float))
    coef, cov, df = _ols(np.column_stack([np.ones_like(x), x, g]), y)
    return _t_interval(float(coef[2]), float(math.sqrt(cov[2, 2])), df, f"OLS group offset, t({df})",
                       len(x), unit, 1, 3)


def mean(values, unit: str = "seeds") -> Interval:
    """The mean with its one-sample t(k - 1) interval (for paired differences, one per seed)."""
    (v,) = _arrays(values)
    k = len(v)
    if k < 2:
        raise ValueError(f"an interval needs at least 2 values, got {k}")
    return _t_interval(float(v.mean()), float(v.std(ddof=1) / math.sqrt(k)), k - 1, f"one-sample t({k - 1})",
                       k, unit, 1, 1)


def _welch_df(v1: float, df1: float, v2: float, df2: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two variances v1 + v2."""
    denominator = (v1 * v1 / df1 if v1 else 0.0) + (v2 * v2 / df2 if v2 else 0.0)
    return (v1 + v2) ** 2 / denominator if denominator > 0 else math.inf


def welch(a, b, unit: str = "seeds per group") -> Interval:
    """mean(a) - mean(b) with Welch's interval (unequal variances)."""
    (a,), (b,) = _arrays(a), _arrays(b)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs at least 2 values per group, got {len(a)} and {len(b)}")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = _welch_df(va, len(a) - 1, vb, len(b) - 1)
    units = (len(a) + len(b)) / 2
    return _t_interval(float(a.mean() - b.mean()), math.sqrt(va + vb), df, f"Welch t({df:.3g})", units, unit,
                       df / units, 0)


def difference(a: Interval, b: Interval) -> Interval:
    """a - b for two independent t-based estimates: se = sqrt(se_a^2 + se_b^2), Welch-Satterthwaite
    degrees of freedom; units are a's."""
    va, vb = a.se**2, b.se**2
    df = _welch_df(va, a.df, vb, b.df)
    return _t_interval(a.estimate - b.estimate, math.sqrt(va + vb), df, f"difference, Welch t({df:.3g})", a.units,
                       a.unit, df / a.units, 0)


def _centred(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """`values` less the mean of their group (one label per value)."""
    return values - pd.Series(values).groupby(pd.Series(labels)).transform("mean").to_numpy()


def correlation(x, y, groups=None, unit: str = "runs") -> Interval:
    """Pearson's r with Fisher's z interval tanh(atanh r ± z_0.975 / sqrt(N - 3 - k)), needing N - 3 - k >= 1.

    With `groups` (one label per run) it is the pooled within-group correlation: x and y centred on
    their group's means, which removes k = groups - 1 further degrees of freedom (a partial
    correlation given the group)."""
    columns = _arrays(x, y, np.arange(len(np.asarray(x))))
    x, y, index = columns
    k = 0
    if groups is not None:
        labels = np.asarray(groups, dtype=object)[index.astype(int)]
        x, y = _centred(x, labels), _centred(y, labels)
        k = len(pd.unique(labels)) - 1
    n = len(x)
    if n - 3 - k < 1:
        raise ValueError(f"a correlation interval needs at least {4 + k} runs here, got {n}")
    r = float(np.corrcoef(x, y)[0, 1])
    r = min(max(r, -1 + 1e-15), 1 - 1e-15)
    z, se = math.atanh(r), 1.0 / math.sqrt(n - 3 - k)
    half = NormalDist().inv_cdf(0.5 + LEVEL / 2) * se
    test = f"Fisher z, N = {n}" + (f" in {k + 1} groups" if groups is not None else "")
    return Interval(r, math.tanh(z - half), math.tanh(z + half), test, n, unit, z, se, math.inf, 0, 0,
                    offset=3 + k, fisher=True)


def _within_r(x: np.ndarray, y: np.ndarray, labels: np.ndarray | None) -> float:
    """Pearson's r of x and y, each centred on its group's mean first when `labels` are given."""
    if labels is not None:
        x, y = _centred(x, labels), _centred(y, labels)
    return float(np.corrcoef(x, y)[0, 1])


def clustered_correlation(x, y, clusters, groups=None, unit: str = "clusters") -> Interval:
    """Pearson's r (pooled within `groups` when given, as `correlation`) with an interval clustered by
    `clusters` (one label per point; a cluster's points are not independent): the delete-one-cluster
    jackknife of Fisher's z, se^2 = (G - 1)/G sum_g (z_(g) - mean z_(.))^2 over the G clusters, and
    tanh(z ± t_0.975(G - 1) se). Needs 3 clusters or more."""
    x, y = (np.asarray(v, dtype=float) for v in (x, y))
    clusters = np.asarray(clusters, dtype=object)
    labels = None if groups is None else np.asarray(groups, dtype=object)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y, clusters = x[keep], y[keep], clusters[keep]
    labels = None if labels is None else labels[keep]
    names = pd.unique(clusters)
    if len(names) < 3:
        raise ValueError(f"a clustered interval needs at least 3 clusters, got {len(names)}")
    with np.errstate(invalid="ignore", divide="ignore"):
        r = _within_r(x, y, labels)
        left_out = np.array([_within_r(x[clusters != g], y[clusters != g], None if labels is None
                                       else labels[clusters != g]) for g in names])
    if not (np.isfinite(r) and np.all(np.isfinite(left_out)) and np.all(np.abs(left_out) < 1)):
        raise ValueError("the correlation is undefined with a cluster left out (too few points per group)")
    r = min(max(r, -1 + 1e-15), 1 - 1e-15)
    zs = np.arctanh(left_out)
    g = len(names)
    se = math.sqrt((g - 1) / g * float(((zs - zs.mean()) ** 2).sum()))
    interval = _t_interval(math.atanh(r), se, g - 1, "", g, unit, 1, 1)
    test = f"Fisher z, jackknife over {g} clusters, t({g - 1}), N = {len(x)}" + (
        f" in {len(pd.unique(labels))} groups" if labels is not None else "")
    return Interval(r, math.tanh(interval.low), math.tanh(interval.high), test, g, unit, interval.center, se,
                    g - 1, 1, 1, fisher=True)


def verdict(interval: Interval, direction: int) -> str:
    """The fidelity page's rule: "reproduced" iff the interval excludes zero in the claimed direction
    (+1 above, -1 below), "differs" iff it excludes zero in the other, else "not resolved at this
    scale"; a claim of no effect (direction 0) differs iff the interval excludes zero."""
    if direction not in (-1, 0, 1):
        raise ValueError(f"direction must be -1, 0 or 1, got {direction}")
    if not (math.isfinite(interval.low) and math.isfinite(interval.high)) or not interval.excludes_zero():
        return UNRESOLVED
    side = 1 if interval.low > 0 else -1
    return REPRODUCED if side == direction else DIFFERS


def equivalence(interval: Interval, margin: float, alpha: float = 0.05) -> str:
    """A flat claim against its margin m (absolute, in the estimate's units): "reproduced" when the
    1 - 2 alpha interval lies inside (-m, m), "differs" when the 1 - alpha interval lies wholly outside
    [-m, m], else "not resolved at this scale"."""
    if not margin > 0:
        raise ValueError(f"an equivalence margin must be positive, got {margin}")
    inner, outer = interval.bounds(1 - 2 * alpha), interval.bounds(1 - alpha)
    if not all(math.isfinite(b) for b in inner + outer):
        return UNRESOLVED
    if -margin < inner[0] and inner[1] < margin:
        return REPRODUCED
    if outer[0] > margin or outer[1] < -margin:
        return DIFFERS
    return UNRESOLVED


def decide(interval: Interval, direction: int, alpha: float = 0.05, margin: float | None = None) -> str:
    """The pre-registered rule: a directional claim (+1, -1) by `verdict`'s rule on the 1 - alpha
    interval; a flat claim (0) by `equivalence` within `margin` (required)."""
    if direction == 0:
        if margin is None:
            raise ValueError("a flat claim is decided against an equivalence margin; none was given")
        return equivalence(interval, margin, alpha)
    low, high = interval.bounds(1 - alpha)
    return verdict(Interval(interval.estimate, low, high, interval.test, interval.units, interval.unit,
                            interval.center, interval.se, interval.df, interval.df_per_unit, interval.df_lost),
                   direction)


def units_to_resolve(interval: Interval, direction: int, margin: float | None = None, alpha: float = 0.05,
                     power: float = 0.5) -> tuple[int | None, str]:
    """The units at which the measured effect and variance would resolve the claim by `decide`'s rule
    with probability `power` (0.5: the expected interval just resolves it), and why not when None.

    A directional claim: until the 1 - alpha interval excludes zero on the estimate's side. A flat
    claim: with |estimate| < m until the 1 - 2 alpha interval fits inside ±m (reproduced), with
    |estimate| > m until the 1 - alpha interval clears m (differs). Never extrapolated from 2 degrees
    of freedom or fewer (for Fisher's z with a fixed 1/sqrt(N - 3), from N - 3 <= 2)."""
    df = interval.df if math.isfinite(interval.df) else interval.units - interval.offset
    if not df > 2:
        return None, f"{df:g} degrees of freedom: too few to extrapolate the variance"
    if not (math.isfinite(interval.center) and math.isfinite(interval.se)):
        return None, "no finite estimate"
    if direction != 0:
        if interval.center == 0:
            return None, "no effect measured"
        found = interval.fewest_units(abs(interval.center), 1 - alpha / 2, power)
    else:
        if margin is None or not margin > 0:
            return None, "a flat claim resolves only against its equivalence margin"
        edge = math.atanh(min(margin, 1 - 1e-15)) if interval.fisher else margin
        distance = edge - abs(interval.center)
        if distance == 0:
            return None, "the estimate sits on the margin"
        found = interval.fewest_units(abs(distance), 1 - alpha if distance > 0 else 1 - alpha / 2, power)
    return (found, "") if found else (None, f"more than {MAX_UNITS} {interval.unit}")


# ----------------------------------------------------------------------------- a family of primary tests


def p_value(interval: Interval, direction: int, margin: float | None = None) -> float:
    """The p value that `decide` compares with alpha. A directional claim (+1, -1): twice the one-sided p in
    the claimed direction, P(T >= t) with t = direction * centre / se (capped at 1), so p < alpha exactly when
    the 1 - alpha interval excludes zero on the claimed side. A flat claim (0), two one-sided tests against
    ±margin: max(P(T >= (centre + m) / se), P(T >= (m - centre) / se)), so p < alpha exactly when the
    1 - 2 alpha interval lies inside ±m."""
    if not (interval.df > 0 and math.isfinite(interval.se) and interval.se > 0 and math.isfinite(interval.center)):
        return math.nan
    if direction == 0:
        if margin is None or not margin > 0:
            raise ValueError("a flat claim's p value needs its equivalence margin")
        edge = math.atanh(min(margin, 1 - 1e-15)) if interval.fisher else margin
        low, high = (interval.center + edge) / interval.se, (edge - interval.center) / interval.se
        return max(1 - t_cdf(low, interval.df), 1 - t_cdf(high, interval.df))
    return min(1.0, 2 * (1 - t_cdf(direction * interval.center / interval.se, interval.df)))


def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, tuple[bool, float]]:
    """Holm's step-down across a family of m tests: sort the p values, p_(1) <= ... <= p_(m); reject while
    p_(i) <= alpha / (m - i + 1) and stop at the first that is not (every later one is kept). Returns, per
    test, (rejected, the level its p value was compared with, or would have been). A p value that is not a
    number counts as 1. The familywise error rate is at most alpha whatever the dependence between tests."""
    order = sorted(p_values, key=lambda name: (p_values[name] if math.isfinite(p_values[name]) else 1.0, name))
    found, going = {}, True
    for i, name in enumerate(order):
        level = alpha / (len(order) - i)
        p = float(p_values[name]) if math.isfinite(p_values[name]) else 1.0  # a NumPy p value gives a plain bool
        going = going and p <= level
        found[name] = (going, level)
    return found


def power_with(interval: Interval, units: float, distance: float, quantile: float) -> float:
    """The power at `units` units of a test whose standard error shrinks from the interval's as
    se sqrt((units now - offset) / (units - offset)): P(the estimate clears t_quantile se) when the true
    value is `distance` (on the centre's scale) from the bound, t_cdf(distance / se - t_quantile, df)."""
    if units <= interval.offset or not (interval.se > 0 and math.isfinite(interval.se)):
        return math.nan
    se = interval.se * math.sqrt((interval.units - interval.offset) / (units - interval.offset))
    df = interval._df_at(units)
    if not df > 0:
        return math.nan
    return t_cdf(distance / se - t_quantile(quantile, df), df)


# ----------------------------------------------------------------------------- dropped runs


def dropped(runs: pd.DataFrame, by: list[str], column: str = "converged") -> pd.DataFrame:
    """Per group of `by`: runs in the table, finished, failed (no metrics), kept by the filter
    `column` and dropped by it (finished but not passing; a missing value does not pass)."""
    status = runs["status"] if "status" in runs else pd.Series("finished", index=runs.index)
    done = status == "finished"
    passed = done & (runs[column].fillna(False).astype(bool) if column in runs else False)
    frame = pd.DataFrame({**{b: runs[b] for b in by}, "runs": 1, "finished": done.astype(int),
                          "failed": (~done).astype(int), "kept": passed.astype(int),
                          "dropped": (done & ~passed).astype(int)})
    return frame.groupby(by, dropna=False, sort=True).sum().reset_index()


# ----------------------------------------------------------------------------- power of a planned design


def power_at(ratio: float, df: float, alpha: float = 0.05) -> float:
    """The power of a two-sided t test at `alpha` for an effect of `ratio` standard errors at `df` degrees
    of freedom: t_cdf(ratio - t_{1-alpha/2}, df), the approximation `slope_design` and `mean_design`
    invert (ratio = t_{1-alpha/2} gives 0.5)."""
    if not df > 0:
        return math.nan
    return t_cdf(abs(ratio) - t_quantile(1 - alpha / 2, df), df)


def slope_power(kept_per_level: dict, sd: float, effect: float, alpha: float = 0.05) -> float:
    """The power of an OLS slope test with `kept_per_level` runs at each x (x -> count, counts may
    differ), residual standard deviation `sd`, for a slope `effect`: se = sd / sqrt(sum_x k_x (x - mean x)^2),
    N - 2 degrees of freedom."""
    counts = {float(x): float(k) for x, k in kept_per_level.items() if k > 0}
    total = sum(counts.values())
    if total < 3 or len(counts) < 2 or not sd > 0:
        return math.nan
    centre = sum(x * k for x, k in counts.items()) / total
    spread = sum(k * (x - centre) ** 2 for x, k in counts.items())
    return power_at(effect * math.sqrt(spread) / sd, total - 2, alpha)


def mean_power(kept: float, sd: float, effect: float, alpha: float = 0.05) -> float:
    """The power of a one-sample t test over `kept` values of standard deviation `sd` for a mean `effect`."""
    if kept < 2 or not sd > 0:
        return math.nan
    return power_at(effect * math.sqrt(kept) / sd, kept - 1, alpha)


def _reaches(ratio: float, df: float, alpha: float, power: float) -> bool:
    """effect / se reaches t_{1 - alpha/2} + t_power at df degrees of freedom (two-sided test at alpha)."""
    return df > 0 and ratio >= t_quantile(1 - alpha / 2, df) + t_quantile(power, df)


def slope_design(levels, keep_rates, sd: float, effect: float, alpha: float = 0.05, power: float = 0.8) -> dict:
    """Seeds per level for an OLS slope: the fewest kept runs k per level (the same at every level)
    at which a slope of size `effect` over runs with residual standard deviation `sd` is found with
    probability `power` by a two-sided t test at `alpha` (effect / se >= t_{1-alpha/2} + t_power,
    se = sd / sqrt(k sum (x - mean x)^2), N - 2 degrees of freedom), and the seeds per level that
    keep k in expectation, ceil(k / keep rate). Returns {"kept_per_level", "seeds", "se", "df"}."""
    levels = [float(x) for x in levels]
    spread = sum((x - sum(levels) / len(levels)) ** 2 for x in levels)
    if not (sd > 0 and effect != 0 and spread > 0 and all(0 < r <= 1 for r in keep_rates)):
        raise ValueError("slope_design needs sd > 0, an effect, two levels or more and keep rates in (0, 1]")
    for k in range(2, MAX_UNITS):
        se = sd / math.sqrt(k * spread)
        if _reaches(abs(effect) / se, k * len(levels) - 2, alpha, power):
            seeds = {x: math.ceil(k / r - 1e-9) for x, r in zip(levels, keep_rates)}
            return {"kept_per_level": k, "seeds": seeds, "se": se, "df": k * len(levels) - 2}
    raise ValueError(f"more than {MAX_UNITS} runs per level would be needed")


def mean_design(sd: float, effect: float, keep_rate: float = 1.0, alpha: float = 0.05, power: float = 0.8) -> dict:
    """Seeds for a one-sample t test of a mean (one value per kept seed): the fewest kept seeds k with
    effect / (sd / sqrt k) >= t_{1-alpha/2} + t_power at k - 1 degrees of freedom, and the seeds
    that keep k in expectation. Returns {"kept", "seeds", "se", "df"}."""
    if not (sd > 0 and effect != 0 and 0 < keep_rate <= 1):
        raise ValueError("mean_design needs sd > 0, an effect and a keep rate in (0, 1]")
    for k in range(2, MAX_UNITS):
        if _reaches(abs(effect) * math.sqrt(k) / sd, k - 1, alpha, power):
            return {"kept": k, "seeds": math.ceil(k / keep_rate - 1e-9), "se": sd / math.sqrt(k), "df": k - 1}
    raise ValueError(f"more than {MAX_UNITS} seeds would be needed")
