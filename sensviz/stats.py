"""Statistics that decide the paper's claims from the experiments' result tables (numpy/pandas only).

Every test returns an `Interval`: the estimate, its 95 % confidence interval, the test that made it
and the replication units behind it. The unit is always an independently trained model (a seed at
one setting), never a noise draw or a direction: the scatter between seeds is the error, so the
within-run standard errors over noise draws play no part here.

- `slope`: ordinary least squares y = a + b x over the runs, interval of b with t(N - 2) (classical
  standard errors: the seed-to-seed variance is taken to be the same at every x);
- `curvature`: y = a + b x + c x^2, interval of c with t(N - 3) (where "linear" is claimed);
- `offset`: y = a + b x + c g with g = 1 for one group, interval of c with t(N - 3): how far one
  group's points lie above the line shared with the others (analysis of covariance);
- `welch`: mean(a) - mean(b) with Welch's standard error and Welch-Satterthwaite degrees of freedom;
- `mean`: a one-sample t interval (paired differences: one value per seed);
- `difference`: the difference of two independent estimates, Welch-Satterthwaite degrees of freedom;
- `correlation`: Pearson's r with Fisher's z interval, tanh(atanh r ± z_0.975 / sqrt(N - 3)), or
  the pooled correlation within groups (a partial correlation given the group).

`verdict` applies the one rule of the fidelity page: "reproduced" iff the 95 % interval excludes
zero in the claimed direction, "differs" iff it excludes zero in the other direction, else "not
resolved at this scale" (a claim of no effect, direction 0, can only differ or stay unresolved).
`Interval.units_needed` is the number of units at which the measured effect and variance would give
an interval that excludes zero. `t_quantile` inverts Student's t distribution through the
regularized incomplete beta function (continued fraction), so no scipy is needed.
"""

from __future__ import annotations

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


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` > 0 degrees of freedom (df = inf: the normal), by
    bisection on `t_cdf` to 1e-12."""
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
        if not (math.isfinite(self.center) and math.isfinite(self.se)) or self.center == 0 or self.se <= 0:
            return None
        ratio = abs(self.center) / self.se

        def enough(k: int) -> bool:
            df = self._df_at(k)
            if df <= 0 or k <= self.offset:
                return False
            needed = t_quantile(0.5 + LEVEL / 2, df) + (t_quantile(power, df) if power > 0.5 else 0.0)
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


def _ols(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Coefficients, their covariance matrix (classical) and the residual degrees of freedom."""
    n, p = design.shape
    if n <= p or np.linalg.matrix_rank(design) < p:
        raise ValueError(f"the fit needs more distinct points than its {p} coefficients (got {n} runs)")
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    sigma2 = residual @ residual / (n - p)
    return coef, sigma2 * np.linalg.inv(design.T @ design), n - p


def _arrays(*columns) -> list[np.ndarray]:
    arrays = [np.asarray(c, dtype=float) for c in columns]
    keep = np.all([np.isfinite(a) for a in arrays], axis=0)
    return [a[keep] for a in arrays]


def _polynomial(x, y, degree: int, unit: str) -> Interval:
    x, y = _arrays(x, y)
    design = np.vander(x, degree + 1, increasing=True)
    coef, cov, df = _ols(design, y)
    levels = len(np.unique(x))
    name = "slope" if degree == 1 else "quadratic term"
    return _t_interval(float(coef[degree]), float(math.sqrt(cov[degree, degree])), df,
                       f"OLS {name}, t({df})", len(x) / levels, unit, levels, degree + 1)


def slope(x, y, unit: str = "seeds per n") -> Interval:
    """OLS slope of y in x over the runs (one value per run), with its t(N - 2) interval; units are
    runs per distinct x (seeds per n)."""
    return _polynomial(x, y, 1, unit)


def curvature(x, y, unit: str = "seeds per n") -> Interval:
    """The quadratic coefficient c of y = a + b x + c x^2 (OLS over the runs), with its t(N - 3)
    interval: zero for a straight line."""
    return _polynomial(x, y, 2, unit)


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


def correlation(x, y, groups=None, unit: str = "runs") -> Interval:
    """Pearson's r with Fisher's z interval tanh(atanh r ± z_0.975 / sqrt(N - 3 - k)), needing N - 3 - k >= 1.

    With `groups` (one label per run) it is the pooled within-group correlation: x and y centred on
    their group's means, which removes k = groups - 1 further degrees of freedom (a partial
    correlation given the group)."""
    columns = _arrays(x, y, np.arange(len(np.asarray(x))))
    x, y, index = columns
    k = 0
    if groups is not None:
        labels = pd.Series(np.asarray(groups, dtype=object)[index.astype(int)])
        x = x - pd.Series(x).groupby(labels).transform("mean").to_numpy()
        y = y - pd.Series(y).groupby(labels).transform("mean").to_numpy()
        k = labels.nunique() - 1
    n = len(x)
    if n - 3 - k < 1:
        raise ValueError(f"a correlation interval needs at least {4 + k} runs here, got {n}")
    r = float(np.corrcoef(x, y)[0, 1])
    r = min(max(r, -1 + 1e-15), 1 - 1e-15)
    z, se = math.atanh(r), 1.0 / math.sqrt(n - 3 - k)
    half = NormalDist().inv_cdf(0.5 + LEVEL / 2) * se
    test = f"Fisher z, N = {n}" + (f" in {k + 1} groups" if groups is not None else "")
    return Interval(r, math.tanh(z - half), math.tanh(z + half), test, n, unit, z, se, math.inf, 0, 0,
                    offset=3 + k)


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
