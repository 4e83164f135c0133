"""The statistics of the fidelity page against hand-computed values on small fixed tables, and
Student's t quantile against printed table values and closed forms."""

import math

import numpy as np
import pandas as pd
import pytest

from sensviz import stats

T975_2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)  # df = 2: t = (2p - 1) / sqrt(2 p (1 - p))


@pytest.mark.parametrize("p, df, value, digits", [
    (0.975, 1, 12.70620474, 8), (0.975, 2, 4.30265273, 8), (0.975, 3, 3.18244631, 8), (0.975, 4, 2.77644511, 8),
    (0.975, 5, 2.57058184, 8), (0.975, 10, 2.22813885, 8), (0.975, 30, 2.04227246, 8), (0.975, 120, 1.97993041, 8),
    (0.995, 4, 4.60409487, 8), (0.95, 3, 2.35336343, 8), (0.8, 5, 0.920, 3), (0.8, 30, 0.854, 3),
    (0.975, math.inf, 1.95996398, 8),
])
def test_t_quantile_matches_printed_tables(p, df, value, digits):
    assert stats.t_quantile(p, df) == pytest.approx(value, abs=0.6 * 10**-digits)
    assert stats.t_quantile(1 - p, df) == pytest.approx(-value, abs=0.6 * 10**-digits)


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.999])
def test_t_quantile_closed_forms_for_one_and_two_degrees_of_freedom(p):
    assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)  # Cauchy
    assert stats.t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)
    assert stats.t_cdf(stats.t_quantile(p, 7.3), 7.3) == pytest.approx(p, abs=1e-12)  # non-integer df (Welch)


def test_incomplete_beta_closed_forms():
    for x in (0.05, 0.3, 0.5, 0.9):
        assert stats.betainc(2.5, 1, x) == pytest.approx(x**2.5, rel=1e-12)
        assert stats.betainc(1, 3.5, x) == pytest.approx(1 - (1 - x) ** 3.5, rel=1e-12)
        assert stats.betainc(0.5, 0.5, x) == pytest.approx(2 / math.pi * math.asin(math.sqrt(x)), rel=1e-12)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        stats.betainc(1, 1, 1.5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_quantile(0.9, 0)


def test_slope_by_hand():
    # x = 1..4, y = 1, 3, 2, 5: Sxx = 5, Sxy = 5.5, b = 1.1, a = 0; residuals -0.1, 0.8, -1.3, 0.6, SSE 2.7
    fit = stats.slope([1, 2, 3, 4], [1, 3, 2, 5])
    se = math.sqrt(2.7 / 2 / 5)
    assert fit.estimate == pytest.approx(1.1) and fit.se == pytest.approx(se) and fit.df == 2
    assert (fit.low, fit.high) == pytest.approx((1.1 - T975_2 * se, 1.1 + T975_2 * se))
    assert fit.test == "OLS slope, t(2)" and fit.units == 1 and stats.verdict(fit, +1) == stats.UNRESOLVED


def test_slope_skips_missing_values_and_counts_seeds_per_n():
    fit = stats.slope([1, 1, 2, 2, 3, 3, 3], [1.0, 1.2, 2.1, 1.9, 3.0, 3.2, math.nan])
    assert fit.df == 4 and fit.units == 2  # 6 runs at 3 lengths
    with pytest.raises(ValueError, match="more distinct points"):
        stats.slope([1, 1, 1], [1, 2, 3])


def test_curvature_by_hand():
    # replicates at x = -1, 0, 1 with means 2, 1, 6 and residuals ±1: c = 3, b = 2, SSE = 6 on 3 df;
    # c = (m_-1 - 2 m_0 + m_1) / 2 with Var(m) = sigma^2 / 2 = 1, so Var(c) = (1 + 4 + 1) / 4
    fit = stats.curvature([-1, -1, 0, 0, 1, 1], [1, 3, 0, 2, 5, 7])
    assert fit.estimate == pytest.approx(3.0) and fit.se == pytest.approx(math.sqrt(1.5)) and fit.df == 3
    assert fit.high - fit.estimate == pytest.approx(3.18244631 * math.sqrt(1.5))
    assert fit.units == 2 and fit.test == "OLS quadratic term, t(3)"


def test_offset_by_hand():
    # two groups at x = 0, 1, 2: common slope 1, offset 11/3 - 4/3 = 7/3, SSE 4/3 on 3 df,
    # Var(c) = sigma^2 (1/3 + 1/3) with sigma^2 = 4/9
    fit = stats.offset([0, 1, 2, 0, 1, 2], [0, 2, 2, 3, 3, 5], [0, 0, 0, 1, 1, 1])
    assert fit.estimate == pytest.approx(7 / 3) and fit.se == pytest.approx(math.sqrt(8 / 27)) and fit.df == 3
    assert stats.verdict(fit, +1) == stats.REPRODUCED  # 7/3 - 3.182 * 0.544 = 0.60 > 0


def test_welch_by_hand():
    # means 2 and 5, variances 1 and 20/3: se^2 = 1/3 + 5/3 = 2, df = 4 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 216/53
    fit = stats.welch([1, 2, 3], [2, 4, 6, 8])
    assert fit.estimate == pytest.approx(-3) and fit.se == pytest.approx(math.sqrt(2))
    assert fit.df == pytest.approx(216 / 53) and fit.units == 3.5
    assert fit.low == pytest.approx(-3 - stats.t_quantile(0.975, 216 / 53) * math.sqrt(2))
    with pytest.raises(ValueError, match="at least 2 values per group"):
        stats.welch([1], [2, 3])


def test_mean_and_seeds_needed_by_hand():
    # 1, 2, 3, 6: mean 3, se = sqrt(14 / 3 / 4); |3| / se = 2.78 < t(3) = 3.18 at 4 seeds,
    # 2.78 sqrt(5/4) = 3.11 >= t(4) = 2.78 at 5
    fit = stats.mean([1, 2, 3, 6])
    assert fit.se == pytest.approx(math.sqrt(7 / 6)) and fit.df == 3 and stats.verdict(fit, +1) == stats.UNRESOLVED
    assert fit.units_needed() == 5
    # 80 % power: 2.78 sqrt(6/4) = 3.40 < t(5) + t_0.8(5) = 2.57 + 0.92; 2.78 sqrt(7/4) = 3.67 >= 2.45 + 0.91
    assert fit.units_needed(power=0.8) == 7
    assert stats.mean([2, 2.1, 1.9]).units_needed() == 2  # already resolved: fewer would still do
    assert stats.mean([1, -1]).units_needed() is None  # no effect measured, no number of seeds helps


def test_difference_of_two_estimates():
    a, b = stats.slope([1, 2, 3, 4], [1, 3, 2, 5]), stats.mean([1, 2, 3, 6])
    diff = stats.difference(a, b)
    va, vb = 2.7 / 2 / 5, 7 / 6
    assert diff.estimate == pytest.approx(1.1 - 3) and diff.se == pytest.approx(math.sqrt(va + vb))
    assert diff.df == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 3))


def test_correlation_by_hand():
    # Sxy = 8, Sxx = Syy = 10: r = 0.8; z = atanh 0.8 = ln 3 / ... ; se = 1 / sqrt(2)
    fit = stats.correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    half = 1.95996398 / math.sqrt(2)
    assert fit.estimate == pytest.approx(0.8)
    assert (fit.low, fit.high) == pytest.approx((math.tanh(math.atanh(0.8) - half), math.tanh(math.atanh(0.8) + half)))
    assert fit.low < 0 and stats.verdict(fit, +1) == stats.UNRESOLVED
    assert fit.units_needed() == 7  # 1.96 / sqrt(N - 3) < atanh 0.8 = 1.0986 from N = 7 on
    with pytest.raises(ValueError, match="at least 4 runs"):
        stats.correlation([1, 2, 3], [3, 2, 1])


def test_correlation_within_groups_by_hand():
    # group a: x = 1, 2, 3, y = 5, 7, 6; group b: x = 11, 12, 13, y = 1, 3, 2 (and a NaN that drops out)
    # centred: x = -1, 0, 1 twice, y = -1, 1, 0 twice: Sxy = 2, Sxx = 4, Syy = 4, r = 0.5; se = 1/sqrt(6 - 3 - 1)
    fit = stats.correlation([1, 2, 3, 11, 12, 13, 14], [5, 7, 6, 1, 3, 2, math.nan], groups=list("aaabbbb"))
    assert fit.estimate == pytest.approx(0.5) and fit.se == pytest.approx(1 / math.sqrt(2))
    assert fit.offset == 4 and fit.test == "Fisher z, N = 6 in 2 groups"
    assert stats.correlation([1, 2, 3, 11, 12, 13], [5, 7, 6, 1, 3, 2]).estimate < 0  # pooled across: negative
    with pytest.raises(ValueError, match="at least 5 runs here"):
        stats.correlation([1, 2, 11, 12], [1, 2, 3, 4], groups=list("aabb"))


def _interval(low, high):
    return stats.Interval((low + high) / 2, low, high, "t", 3, "seeds", (low + high) / 2, 1.0, 2, 1, 1)


def test_verdict_rule():
    assert stats.verdict(_interval(0.1, 0.5), +1) == "reproduced"
    assert stats.verdict(_interval(0.1, 0.5), -1) == "differs"
    assert stats.verdict(_interval(-0.5, -0.1), -1) == "reproduced"
    assert stats.verdict(_interval(-0.1, 0.5), +1) == "not resolved at this scale"
    assert stats.verdict(_interval(-0.1, 0.5), -1) == "not resolved at this scale"
    assert stats.verdict(_interval(0.1, 0.5), 0) == "differs"  # a claim of no effect
    assert stats.verdict(_interval(-0.1, 0.5), 0) == "not resolved at this scale"
    assert stats.verdict(_interval(math.nan, math.nan), +1) == "not resolved at this scale"
    with pytest.raises(ValueError, match="direction"):
        stats.verdict(_interval(0.1, 0.5), 2)


def test_dropped_counts_failed_and_filtered_runs():
    runs = pd.DataFrame({"task": ["a", "a", "a", "b", "b"], "status": ["finished", "finished", "failed", "finished",
                                                                      "finished"],
                         "converged": [True, False, None, True, None]})
    table = stats.dropped(runs, ["task"]).set_index("task")
    assert table.loc["a"].to_dict() == {"runs": 3, "finished": 2, "failed": 1, "kept": 1, "dropped": 1}
    assert table.loc["b"].to_dict() == {"runs": 2, "finished": 2, "failed": 0, "kept": 1, "dropped": 1}


# ----------------------------------------------------------------------------- the pre-registered analyses


def _heteroscedastic(seed=0, per_level=5):
    rng = np.random.default_rng(seed)
    x = np.repeat([4.0, 8.0, 11.0, 14.0], per_level)
    return x, 0.05 + 0.02 * x + rng.normal(0, 0.01 * x), rng.uniform(0, 3000, len(x))


def test_classical_slope_matches_the_closed_form_and_hc3_the_leave_one_out_sum():
    x, y, _ = _heteroscedastic()
    design = np.column_stack([np.ones_like(x), x])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    residual = y - design @ coef
    sxx = ((x - x.mean()) ** 2).sum()
    classical = stats.slope(x, y)
    assert classical.estimate == pytest.approx(coef[1], rel=1e-12)
    assert classical.se == pytest.approx(math.sqrt(residual @ residual / (len(x) - 2) / sxx), rel=1e-10)
    # HC3 = sum_i (b_(i) - b)^2 over the leave-one-out refits (b - b_(i) = (X'X)^-1 x_i e_i / (1 - h_i))
    refits = [np.linalg.lstsq(np.delete(design, i, 0), np.delete(y, i), rcond=None)[0][1] for i in range(len(x))]
    robust = stats.slope(x, y, error="HC3")
    assert robust.estimate == classical.estimate and robust.df == classical.df == len(x) - 2
    assert robust.se == pytest.approx(math.sqrt(((np.array(refits) - coef[1]) ** 2).sum()), rel=1e-10)
    assert robust.test == f"OLS slope, HC3, t({len(x) - 2})"
    with pytest.raises(ValueError, match="leverage"):
        stats.slope([1, 2, 2, 2], [1, 2, 2.1, 2.3], error="HC3")  # the only run at x = 1: leverage 1
    with pytest.raises(ValueError, match="error must be one of"):
        stats.slope(x, y, error="HC1")


def test_slope_given_a_covariate_matches_lstsq_and_frisch_waugh():
    x, y, z = _heteroscedastic(1)
    design = np.column_stack([np.ones_like(x), x, z])
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    residual = y - design @ coef
    cov = residual @ residual / (len(x) - 3) * np.linalg.inv(design.T @ design)
    fit = stats.slope_given(x, y, z)
    assert fit.estimate == pytest.approx(coef[1], rel=1e-10) and fit.se == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-10)
    assert fit.df == len(x) - 3 and fit.units == 5
    # Frisch-Waugh-Lovell: the slope of y's residual on x's residual, both after [1, z]
    base = np.column_stack([np.ones_like(z), z])
    rx = x - base @ np.linalg.lstsq(base, x, rcond=None)[0]
    ry = y - base @ np.linalg.lstsq(base, y, rcond=None)[0]
    assert fit.estimate == pytest.approx((rx @ ry) / (rx @ rx), rel=1e-10)
    z[0] = math.nan  # a run without a convergence step drops out
    assert stats.slope_given(x, y, z).df == len(x) - 4


def test_bounds_at_another_level():
    fit = stats.mean([1, 2, 3, 6])  # mean 3, se sqrt(7/6), df 3
    low, high = fit.bounds(0.9)
    assert (low, high) == pytest.approx((3 - 2.35336343 * math.sqrt(7 / 6), 3 + 2.35336343 * math.sqrt(7 / 6)))
    assert fit.bounds() == pytest.approx((fit.low, fit.high))
    r = stats.correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    half = 1.64485363 / math.sqrt(2)
    assert r.bounds(0.9) == pytest.approx((math.tanh(math.atanh(0.8) - half), math.tanh(math.atanh(0.8) + half)))


def _normal(center, se=1.0):
    return stats.Interval(center, center - 1.96 * se, center + 1.96 * se, "z", 10, "seeds", center, se, math.inf, 1, 0)


def test_equivalence_rule():
    # normal quantiles: the 90 % interval is ±1.645 se, the 95 % one ±1.960 se
    assert stats.equivalence(_normal(0.0), 1.7) == stats.REPRODUCED  # [-1.645, 1.645] inside ±1.7
    assert stats.equivalence(_normal(0.1), 1.7) == stats.UNRESOLVED  # 1.745 reaches past 1.7
    assert stats.equivalence(_normal(-3.7), 1.7) == stats.DIFFERS  # [-5.66, -1.74] wholly below -1.7
    assert stats.equivalence(_normal(3.6), 1.7) == stats.UNRESOLVED  # 95 % low 1.64 inside the margin
    assert stats.equivalence(_normal(0.0, se=math.nan), 1.7) == stats.UNRESOLVED
    with pytest.raises(ValueError, match="positive"):
        stats.equivalence(_normal(0.0), 0)
    # at alpha = 0.1 the inner interval is the 80 % one (±1.2816): inside ±1.5, the 90 % one is not
    assert stats.equivalence(_normal(0.0), 1.5, alpha=0.1) == stats.REPRODUCED
    assert stats.equivalence(_normal(0.0), 1.5) == stats.UNRESOLVED


def test_decide_uses_the_claims_alpha_and_needs_a_margin_for_a_flat_claim():
    fit = _normal(1.8)  # 95 %: [-0.16, 3.76]; 90 %: [0.155, 3.445]
    assert stats.decide(fit, +1) == stats.UNRESOLVED
    assert stats.decide(fit, +1, alpha=0.1) == stats.REPRODUCED
    assert stats.decide(fit, -1, alpha=0.1) == stats.DIFFERS
    assert stats.decide(_normal(0.0), 0, margin=1.7) == stats.REPRODUCED
    with pytest.raises(ValueError, match="margin"):
        stats.decide(fit, 0)


def test_units_to_resolve():
    fit = stats.mean([1, 2, 3, 6])  # df 3: a directional claim agrees with units_needed
    assert stats.units_to_resolve(fit, +1) == (fit.units_needed(), "")
    assert stats.units_to_resolve(fit, +1, power=0.8) == (fit.units_needed(0.8), "")
    assert stats.units_to_resolve(stats.slope([1, 2, 3, 4], [1, 3, 2, 5]), +1) == (
        None, "2 degrees of freedom: too few to extrapolate the variance")
    assert stats.units_to_resolve(fit, 0)[0] is None  # a flat claim without a margin
    # flat, inside the margin: 8 values of mean 0.1 and sd 1 against m = 0.5; brute force over k
    values = np.array([1.1, -0.9, 1.1, -0.9, 1.1, -0.9, 0.1, 0.1])
    flat = stats.mean(values)
    assert flat.estimate == pytest.approx(0.1)
    k, reason = stats.units_to_resolve(flat, 0, margin=0.5)

    def inside(units):  # the 90 % interval at `units` seeds, same mean and sd
        half = stats.t_quantile(0.95, units - 1) * values.std(ddof=1) / math.sqrt(units)
        return 0.1 + half <= 0.5

    assert reason == "" and inside(k) and not inside(k - 1)
    # flat, beyond the margin: until the 95 % interval clears it
    far = stats.mean(values + 0.6)
    k, _ = stats.units_to_resolve(far, 0, margin=0.5)

    def clears(units):
        return 0.7 - stats.t_quantile(0.975, units - 1) * values.std(ddof=1) / math.sqrt(units) >= 0.5

    assert clears(k) and not clears(k - 1)


def test_clustered_correlation_is_the_cluster_jackknife_and_ignores_duplicated_clusters():
    rng = np.random.default_rng(3)
    clusters = np.repeat(np.arange(8), 3)  # 8 functions, 3 points each
    groups = np.tile(["learned", "completion", "completion"], 8)
    shared = np.repeat(rng.normal(size=8), 3)
    x = shared + rng.normal(size=24) + (groups == "completion") * 5
    y = shared + rng.normal(size=24) + (groups == "completion") * 3
    fit = stats.clustered_correlation(x, y, clusters, groups, unit="functions")
    assert fit.estimate == pytest.approx(stats.correlation(x, y, groups=groups).estimate, rel=1e-12)
    zs = []
    for g in range(8):
        keep = clusters != g
        xc, yc = x[keep].copy(), y[keep].copy()
        for label in ("learned", "completion"):
            inside = groups[keep] == label
            xc[inside] -= xc[inside].mean()
            yc[inside] -= yc[inside].mean()
        zs.append(math.atanh(np.corrcoef(xc, yc)[0, 1]))
    zs = np.array(zs)
    se = math.sqrt(7 / 8 * ((zs - zs.mean()) ** 2).sum())
    assert fit.se == pytest.approx(se, rel=1e-10) and fit.df == 7 and fit.units == 8
    half = stats.t_quantile(0.975, 7) * se
    assert (fit.low, fit.high) == pytest.approx((math.tanh(math.atanh(fit.estimate) - half),
                                                 math.tanh(math.atanh(fit.estimate) + half)))
    # every point twice: the same clusters, the same interval; the unclustered one narrows
    twice = stats.clustered_correlation(np.tile(x, 2), np.tile(y, 2), np.tile(clusters, 2), np.tile(groups, 2))
    assert (twice.estimate, twice.low, twice.high) == pytest.approx((fit.estimate, fit.low, fit.high), rel=1e-9)
    naive, naive_twice = (stats.correlation(np.tile(x, k), np.tile(y, k), groups=np.tile(groups, k)) for k in (1, 2))
    assert naive_twice.high - naive_twice.low < 0.75 * (naive.high - naive.low)
    with pytest.raises(ValueError, match="at least 3 clusters"):
        stats.clustered_correlation(x[:6], y[:6], clusters[:6])


def test_power_inverts_the_designs():
    assert stats.power_at(stats.t_quantile(0.975, 12), 12) == pytest.approx(0.5, abs=1e-12)
    design = stats.slope_design([4, 8, 11, 14], [1, 1, 1, 1], sd=0.13, effect=0.015)
    k = design["kept_per_level"]
    at = {x: k for x in (4, 8, 11, 14)}
    assert stats.slope_power(at, 0.13, 0.015) >= 0.8 > stats.slope_power({x: k - 1 for x in at}, 0.13, 0.015)
    assert stats.slope_power({4: 3, 8: 3}, 0.13, 0.0) == pytest.approx(stats.t_cdf(-stats.t_quantile(0.975, 4), 4))
    m = stats.mean_design(sd=2.4, effect=-2.0)["kept"]
    assert stats.mean_power(m, 2.4, -2.0) >= 0.8 > stats.mean_power(m - 1, 2.4, -2.0)
    assert math.isnan(stats.mean_power(1, 2.4, -2.0))
