"""The Lab: the shipped data is current, every claim a chapter makes is recomputed from its chart's own data
with the test's own rule, and the same chapter built on altered data, where the claim is false, says something
else. One chapter per test, from the data shipped beside the zoo (`sensviz lab-data`)."""

import copy
import itertools
import json
import math
import re
import shutil
import zlib

import numpy as np
import pandas as pd
import pytest
from helpers.lab import RESULTS, ROOT, SOURCES, data, same_measurement
from pdf_fill import page_fill

from sensviz import fidelity, glossary, lab
from sensviz.checkpoints import file_hash, read_metadata
from sensviz.mathml import mathml


def altered(number: int, table: str, change) -> lab.Data:
    """The chapter's data with one table changed by `change(frame) -> frame`."""
    d = copy.deepcopy(data(number))
    d.tables[table] = change(d.tables[table].copy())
    return d


def views(chart) -> list[tuple[str, pd.DataFrame]]:
    """Every (title, data) of a chart's spec: the data a reader of the chart sees."""
    spec = chart.to_dict()
    sets = {name: pd.DataFrame(rows) for name, rows in spec.get("datasets", {}).items()}
    found = []

    def walk(node, title=""):
        if isinstance(node, dict):
            title = node.get("title", title) if isinstance(node.get("title", title), str) else title
            if isinstance(node.get("data"), dict) and node["data"].get("name") in sets:
                found.append((title, sets[node["data"]["name"]]))
            for value in node.values():
                walk(value, title)
        elif isinstance(node, list):
            for value in node:
                walk(value, title)

    walk(spec)
    return found


def by_title(chart) -> dict[str, pd.DataFrame]:
    """The first data of each titled view."""
    found = {}
    for title, frame in views(chart):
        found.setdefault(title, frame)
    return found


def text(built: lab.Built) -> str:
    return built.look_for + " " + built.answer


# ----------------------------------------------------------------------------- shipped data


def test_the_shipped_data_is_current_for_every_chapter_and_stale_data_is_measured_again(tmp_path):
    store = lab.read_store(SOURCES.checkpoints)
    assert all(lab.stored(ch, SOURCES, store) is not None for ch in lab.CHAPTERS)
    # a copy of the zoo where chapter 2's model has other bytes than the data was measured from
    shutil.copy(ROOT / "checkpoints" / "encoder-parity-n8.safetensors", tmp_path)
    raw = json.loads((ROOT / "checkpoints" / lab.DATA_FILE).read_text())
    raw["chapters"]["2"]["inputs"]["encoder-parity-n8.safetensors"] = "0" * 64
    (tmp_path / lab.DATA_FILE).write_text(json.dumps(raw))
    copy_ = lab.Sources.shipped(tmp_path, RESULTS)
    assert lab.stored(lab.chapter(2), copy_) is None
    said = []
    built = lab.chapter(2).build(copy_, progress=said.append)
    assert said and "measuring" in said[0] and "encoder-parity-n8" in said[0]
    assert built.numbers == pytest.approx(lab.chapter(2).present(data(2), lab.SHARPNESS).numbers, rel=1e-12)


def test_data_measured_under_another_quantity_registry_is_not_read(tmp_path):
    raw = json.loads((ROOT / "checkpoints" / lab.DATA_FILE).read_text())
    assert lab.read_summaries(ROOT / "checkpoints") and raw["quantities"] == lab.registry_key()
    (tmp_path / lab.DATA_FILE).write_text(json.dumps({**raw, "quantities": "0" * 64}))  # before a quantity was added
    assert lab.read_store(tmp_path) == {} and lab.read_summaries(tmp_path) == {}
    (tmp_path / lab.DATA_FILE).write_text(json.dumps(raw))
    assert lab.read_store(tmp_path) == raw["chapters"]


def test_write_data_measures_only_what_changed_and_leaves_the_checkpoints_alone(tmp_path):
    shutil.copy(ROOT / "checkpoints" / "encoder-parity-n8.safetensors", tmp_path)
    before = (tmp_path / "encoder-parity-n8.safetensors").read_bytes()
    raw = json.loads((ROOT / "checkpoints" / lab.DATA_FILE).read_text())
    only = {"2": raw["chapters"]["2"]}
    saved = lab.CHAPTERS
    try:
        lab.CHAPTERS = (lab.chapter(2),)
        (tmp_path / lab.DATA_FILE).write_text(json.dumps({**raw, "chapters": only}))
        assert lab.write_data(tmp_path, RESULTS)["measured"] == []
        (tmp_path / lab.DATA_FILE).unlink()
        assert lab.write_data(tmp_path, RESULTS)["measured"] == [2]
    finally:
        lab.CHAPTERS = saved
    assert (tmp_path / "encoder-parity-n8.safetensors").read_bytes() == before
    assert json.loads((tmp_path / lab.DATA_FILE).read_text())["chapters"]["2"] == raw["chapters"]["2"]


def test_a_fresh_measurement_is_the_shipped_one_within_float32_order_only():
    summary = lab.read_summaries(SOURCES.checkpoints)["encoder-first-n8"]["summary"]
    assert same_measurement(summary, json.loads(json.dumps(summary)))
    nudged = {k: v * (1 + 1e-8) if isinstance(v, float) else v for k, v in summary.items()}
    assert same_measurement(nudged, summary)
    key = next(k for k, v in summary.items() if isinstance(v, float) and v)
    assert not same_measurement({**summary, key: summary[key] * (1 + 1e-3)}, summary)
    assert not same_measurement({**summary, "extra": 1.0}, summary)
    cube = lab.read_store(SOURCES.checkpoints)["1"]["data"]["tables"]["cube"]
    column = cube["columns"].index("output")
    near_zero = min(range(len(cube["data"])), key=lambda i: abs(cube["data"][i][column]))
    rounded = {**cube, "data": [row[:column] + [row[column] + 2e-7] + row[column + 1:] if i == near_zero else row
                                for i, row in enumerate(cube["data"])]}
    assert same_measurement(rounded, cube)  # float32 rounding of a near-zero output, as another CPU gives it
    wrong = {**cube, "data": [row[:column] + [row[column] + 1e-3] + row[column + 1:] if i == near_zero else row
                              for i, row in enumerate(cube["data"])]}
    assert not same_measurement(wrong, cube)


def test_the_shipped_summaries_of_the_setups_models_are_current_and_a_fresh_measurement():
    summaries = lab.read_summaries(SOURCES.checkpoints)
    assert set(summaries) == set(lab.summary_models()) and "encoder-parity-n16" in summaries
    for name, entry in summaries.items():
        path = ROOT / "checkpoints" / f"{name}.safetensors"
        assert entry["sha256"] == file_hash(path) and entry["n"] == int(read_metadata(path)["n"])
        assert lab.stored_summary(summaries, name, entry["sha256"], entry["n"]) == entry["summary"]
    assert lab.stored_summary(summaries, "encoder-first-n8", "0" * 64, 8) is None  # other bytes: measure again
    assert lab.stored_summary(summaries, "encoder-first-n8", summaries["encoder-first-n8"]["sha256"], 6) is None
    assert same_measurement(lab.measure_summary(SOURCES.load("encoder-first-n8")), summaries["encoder-first-n8"]["summary"])


# ----------------------------------------------------------------------------- chapter 1


def test_chapter_1_says_where_parity_is_sensitive_by_its_cube():
    built = lab.chapter(1).present(data(1), 8)
    parity = by_title(built.figures[0].chart)["PARITY"]
    share = float((parity["s_model"].round() == 8).mean())
    assert share == 1.0 and "under all 8 flips at every input" in built.look_for
    assert built.correct == "all n of them"
    # a PARITY model that misses a flip at a tenth of its inputs is no longer "at every input"
    wrong = altered(1, "cube", lambda t: t.assign(s_model=np.where(
        (t["model"] == "PARITY") & (t["n"] == 8) & (t["vertex"] % 10 == 0), 7, t["s_model"])))
    again = lab.chapter(1).present(wrong, 8)
    share = float((by_title(again.figures[0].chart)["PARITY"]["s_model"] == 8).mean())
    assert "at every input" not in again.claims["parity_where"] and f"at {share:.0%} of the inputs" in again.look_for
    half = altered(1, "cube", lambda t: t.assign(s_model=np.where(t["model"] == "PARITY", t["n"] / 2, t["s_model"])))
    assert lab.chapter(1).present(half, 8).correct == "about half of them"


def test_chapter_1s_control_draws_another_n():
    small = lab.chapter(1).present(data(1), 4)
    assert small.numbers["n"] == 4 and len(by_title(small.figures[0].chart)["PARITY"]) == 16


# ----------------------------------------------------------------------------- chapter 2


def test_chapter_2_takes_its_takeover_step_and_sharpness_change_from_its_charts():
    built = lab.chapter(2).present(data(2), lab.SHARPNESS)
    history = views(built.figures[0].chart)[0][1]
    top = history[history["degree"] == 8].sort_values("step")
    step = int(top[top["weight"] >= 0.5]["step"].iloc[0])
    assert f"takes over by step {step}" in built.look_for
    before = history[history["step"] < step]
    low = before.groupby("degree")["weight"].mean().idxmax()
    assert f"sits mostly at degree {low}" in built.look_for  # not "almost nowhere": the weight is at degree {low}
    curves = pd.concat(frame for _, frame in views(built.figures[1].chart))
    sharp = curves[curves["metric"] == lab.SHARPNESS]
    ratio = sharp[sharp["step"] >= step]["value"].mean() / sharp[sharp["step"] < step]["value"].mean()
    assert ratio > 1.5 and f"rises {ratio:.2g}-fold" in built.look_for and built.correct == "it rises"
    flat = altered(2, "curves", lambda t: t.assign(value=np.where(t["metric"] == lab.SHARPNESS, 0.02, t["value"])))
    again = lab.chapter(2).present(flat, lab.SHARPNESS)
    assert "stays about the same" in again.look_for and again.correct == "it stays about the same"
    never = altered(2, "history", lambda t: t.assign(weight=np.where(t["degree"] == 8, 0.1, t["weight"])))
    assert "does not take over" in lab.chapter(2).present(never, lab.SHARPNESS).look_for


# ----------------------------------------------------------------------------- chapter 3


def test_chapter_3_asks_about_n_and_its_chart_shows_n():
    built = lab.chapter(3).present(data(3), 12)
    factors = pd.concat(frame for _, frame in views(built.figures[0].chart))
    means = factors[factors["statistic"] == "mean of N"].groupby("model")["N"].mean()
    ratio = means["PARITY"] / means["FIRST"]
    assert ratio > 1.2 and f"{ratio:.2g}× larger" in built.look_for and built.correct == "the PARITY model"
    assert "Blowup" in " ".join(lab.chapter(3).definitions())
    swapped = altered(3, "layers", lambda t: t.assign(mean_N=np.where(t["model"] == "PARITY", 1.0, 3.0)))
    again = lab.chapter(3).present(swapped, 12)
    assert "smaller" in again.claims["factors"] and again.correct == "the FIRST model"


# ----------------------------------------------------------------------------- chapter 4


def test_chapter_4_states_the_charted_quantity_and_compares_by_error_bars():
    built = lab.chapter(4).present(data(4), 1.0)
    curve = views(built.figures[0].chart)[0][1]
    at = curve[curve["fraction"] == 1.0].set_index("model")
    p, f = at.loc["PARITY"], at.loc["FIRST"]
    assert p["value"] - p["stderr"] > f["value"] + f["stderr"]
    assert f"{p['value'] / f['value']:.2g}× sharper" in built.look_for and built.correct == "PARITY's"
    assert f"L_ρ/ρ² = {p['ratio']:.3g}" in built.look_for  # the chart's own quantity, named as such
    close = altered(4, "radius", lambda t: t.assign(value=np.where(t["model"] == "FIRST", t["value"].max(), t["value"])))
    again = lab.chapter(4).present(close, 1.0)
    assert "not clearly sharper" in again.look_for and again.correct == "about the same"


def test_chapter_4_says_how_far_each_curve_ends_from_its_exact_limit_from_the_charted_rows():
    """The curves are estimates from seeded directions and the dashed lines exact: the caption gives each curve's gap
    at the smallest radius in its own standard errors, computed from the chart's rows, and the rule's two branches."""
    built = lab.chapter(4).present(data(4), 1.0)
    curve = views(built.figures[0].chart)[0][1]
    for name, rows in curve.groupby("model"):
        low = rows.loc[rows["rho"].idxmin()]
        gap = (low["value"] - low["limit"] * low["rho"] ** 2) / low["stderr"]
        assert f"{name} {gap:+.1f}" in built.figures[0].caption
    assert "within two standard errors" in built.figures[0].caption  # the shipped gaps: -1.6 and -1.2
    off = altered(4, "radius", lambda t: t.assign(limit=np.where(t["model"] == "FIRST", t["limit"] * 2, t["limit"])))
    assert "FIRST lies more than two standard errors" in lab.chapter(4).present(off, 1.0).figures[0].caption
    assert lab.gap_words({"PARITY": float("nan"), "FIRST": float("inf")}, 64) == ""  # no standard error: no claim


# ----------------------------------------------------------------------------- chapter 5


def fidelitys_slope() -> tuple[float, float, float, str, int | None]:
    """L1 as the fidelity page decides it: by the finished pre-registered sweep where there is one (its
    primary test), else at the page's scale: (estimate, low, high, verdict, kept runs or None)."""
    decided = fidelity.decisions(RESULTS).get("length_scaling")
    if decided is not None:
        primary = decided.claims[0].primary
        return (primary.interval.estimate, *primary.bounds, primary.verdict, primary.kept)
    _, claims = fidelity.build(RESULTS)
    slope = next(c for c in claims if c.experiment == "length_scaling" and "grows with n" in c.statement)
    return slope.interval.estimate, slope.interval.low, slope.interval.high, slope.verdict, None


def test_chapter_5_reads_fidelitys_verdict_and_describes_its_own_points():
    built = lab.chapter(5).present(data(5), "PARITY and FIRST")
    estimate, low, high, verdict, kept = fidelitys_slope()
    assert built.numbers["slope"] == pytest.approx(estimate)
    assert (built.numbers["slope_low"], built.numbers["slope_high"]) == pytest.approx((low, high))
    assert built.numbers["verdict"] == verdict
    points = views(built.figures[0].chart)[0][1]
    parity = points[points["task"] == "parity"].sort_values("n")
    # the slope over the kept runs is the count-weighted slope of the per-n means the chart draws
    weighted = np.polyfit(parity["n"], parity["mean"], 1, w=np.sqrt(parity["count"]))[0]
    assert weighted == pytest.approx(built.numbers["slope"], rel=1e-6)
    assert kept is None or parity["count"].sum() == kept  # the points are the runs the decision rests on
    rising = bool(np.all(np.diff(parity["mean"]) > 0))
    assert ("rises with n at every step" in built.look_for) == rising
    assert all(f"{int(c)} at n = {int(n)}" in built.look_for for n, c in zip(parity["n"], parity["count"]))
    if low <= 0 <= high:
        assert built.correct == "these runs cannot tell" and "not shown to grow" in built.answer
        assert "sharper as n grows" not in text(built)
    grows = copy.deepcopy(data(5))
    grows.numbers.update(slope_low=0.01, slope_high=0.05)
    grows.tables["points"] = grows.tables["points"].assign(mean=lambda t: t["n"] * 0.01)
    again = lab.chapter(5).present(grows, "PARITY and FIRST")
    assert again.correct == "yes, it grows" and "grows with n" in again.answer and "rises with n at every step" in again.look_for


def test_chapter_5_counts_the_runs_that_trained_on_after_the_filter_from_the_table():
    """Issue 36: the chapter states how long its runs trained after the filter, counted from the runs' table (the
    kept PARITY runs of the arm that trains on after first meeting the filter), in a student's words."""
    built = lab.chapter(5).present(data(5), "PARITY and FIRST")
    folder, scale = lab.get_experiment("length_scaling").lab.folder(RESULTS)
    runs = pd.read_parquet(folder / "runs.parquet")
    kept = runs[(runs["task"] == "parity") & runs["converged"].fillna(False).astype(bool) & (runs["status"] == "finished")]
    if "relax_steps" in kept and kept["relax_steps"].notna().any():
        kept = kept[kept["relax_steps"].notna()]
        relax = int(kept["relax_steps"].max())
        done = int((kept["steps_since_converged"] >= kept["relax_steps"]).sum())
        said = f"{done} of {len(kept)} runs trained {relax:,} steps after they first passed the convergence filter"
        assert said in built.look_for
        assert f"the other {len(kept) - done} reached the limit of {int(kept['steps'].max()):,} steps" in built.look_for
        assert done < len(kept) and "every run trains" not in built.look_for
        points = views(built.figures[0].chart)[0][1]
        assert points[points["task"] == "parity"]["count"].sum() == len(kept)  # the runs the line is drawn from
        every = altered(5, "after_filter", lambda t: t.assign(steps_since_converged=t["relax_steps"]))
        again = lab.chapter(5).present(every, "PARITY and FIRST")
        assert f"all {len(kept)} runs trained {relax:,} steps after they first passed the convergence filter" in again.look_for
    else:
        assert "after they first passed the convergence filter" not in built.look_for


# ----------------------------------------------------------------------------- chapter 6


def test_chapter_6_counts_the_more_sensitive_functions_on_its_chart():
    built = lab.chapter(6).present(data(6), lab.FEW_COMPARE[0])
    strip = views(built.figures[0].chart)[0][1]
    learned = strip[strip["function"] == lab.LEARNED]["as_n"].iloc[0]
    others = strip[strip["function"] == lab.FEW_COMPARE[0]]["as_n"]
    share = (others > learned).mean()
    assert share >= 0.95 and "almost all" in built.claims["below"] and f"{share:.0%}" in built.look_for
    assert lab.LEARNED not in set(views(built.figures[0].blind)[0][1]["function"])  # the blind chart hides it
    high = altered(6, "functions", lambda t: t.assign(as_n=np.where(t["function"] == lab.LEARNED, 8.0, t["as_n"])))
    again = lab.chapter(6).present(high, lab.FEW_COMPARE[0])
    assert again.claims["below"] == "not less sensitive than most of them" and again.correct == "more sensitive than most"


# ----------------------------------------------------------------------------- chapter 7


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by bisection on its CDF, the density integrated numerically (Simpson, 20,000 steps)."""
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, t, 20_001)
        y = np.exp(log_c - (df + 1) / 2 * np.log1p(x**2 / df))
        return 0.5 + (x[1] - x[0]) / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum())

    low, high = 0.0, 50.0
    for _ in range(60):
        low, high = ((low + high) / 2, high) if cdf((low + high) / 2) < p else (low, (low + high) / 2)
    return (low + high) / 2


def t_interval(values, level: float = 0.95) -> tuple[float, float]:
    """The test's own two-sided t interval of a mean."""
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)  # the textbook table's value
    values = np.asarray(values, dtype=float)
    half = t_quantile((1 + level) / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return values.mean() - half, values.mean() + half


def test_chapter_7_decides_the_random_transformers_by_the_claims_rule_on_its_charts_data():
    ch = lab.chapter(7)
    for scale in ch.control.options:
        built = ch.present(data(7), scale)
        strip = views(built.figures[0].chart)[0][1]
        inits = strip[strip["function"] == lab.INITS]["as_n"] / built.numbers["n"]
        assert len(inits) == built.numbers["count"] == 128 and f"init scale {scale:g}" in built.figures[0].title
        shipped = data(7).tables["inits"]  # the try-it option draws the scale it names
        assert sorted(inits * built.numbers["n"]) == sorted(shipped[shipped["init_scale"] == scale]["avg_sensitivity"])
        low, high = t_interval(inits)
        assert (built.numbers["ratio_low"], built.numbers["ratio_high"]) == pytest.approx((low, high), rel=1e-9)
        expected = "well below n/2" if high < 0.4 else "above n/2" if low > 0.5 else "about n/2"
        assert built.correct == built.claims["init"] == expected, scale
        assert f"{low:.3f} to {high:.3f}" in built.look_for
        blind = set(views(built.figures[0].blind)[0][1]["function"])  # before the reveal: the random functions only
        assert blind == {lab.UNIFORM} and built.figures[1].blind is None  # (the trained PARITY model is chapter 1's answer)
    # random transformers as sensitive as a random function: about n/2; far more: above n/2
    for shift, words in ((4.0, "about n/2"), (6.5, "above n/2")):
        moved = altered(7, "inits", lambda t, s=shift: t.assign(avg_sensitivity=s + 0.1 * np.sin(t["init"])))
        again = ch.present(moved, 1.0)
        assert again.correct == words and again.claims["init"] == words


def test_chapter_7_compares_the_least_sharp_function_preserving_change_by_error_bars():
    built = lab.chapter(7).present(data(7), 1.0)
    bars = views(built.figures[2].chart)[0][1].set_index(["model", "quantity"])
    p, f = bars.loc[("PARITY", lab.ORBIT[1])], bars.loc[("FIRST", lab.ORBIT[1])]
    assert p["value"] <= bars.loc[("PARITY", lab.ORBIT[0]), "value"] + 1e-12  # the least over changes tried (with θ's own)
    apart = p["value"] - p["stderr"] > f["value"] + f["stderr"]
    assert apart and built.claims["orbit"] == f"{p['value'] / f['value']:.2g}× sharper"
    assert f"PARITY's minimum stays {built.claims['orbit']}" in built.look_for
    close = altered(7, "orbit", lambda t: t.assign(value=np.where(
        (t["model"] == "FIRST") & (t["quantity"] == lab.ORBIT[1]), float(p["value"]), t["value"])))
    assert lab.chapter(7).present(close, 1.0).claims["orbit"] == "not clearly sharper: the error bars overlap"


def test_chapter_7s_shipped_random_transformers_are_the_init_studys():
    """The first 8 of each init scale's 128 shipped initialisations, and the trained models read the same way,
    equal a fresh study (initialisation m uses seed m, so the first 8 of 128 are a study of 8)."""
    from sensviz.init_study import init_studies, scale_free_view

    shipped = data(7)
    fresh = init_studies(lab.INIT_MODEL, lab.INIT_N, 8, lab.INIT_SCALES, lab.INIT_SEED)
    for study in fresh:
        rows = shipped.tables["inits"]
        rows = rows[rows["init_scale"] == study.init_scale].sort_values("init").head(8)
        assert rows["avg_sensitivity"].to_numpy() == pytest.approx(study.avg_sensitivity.numpy(), abs=1e-12)
    functions = shipped.tables["functions"].set_index("function")["as_n"]
    for name in lab.ORBIT_MODELS:
        ck = SOURCES.load(name)
        view = scale_free_view(ck.model, ck.n)
        assert functions[f"trained {ck.task.name.upper()} model"] == pytest.approx(view.avg_sensitivity, abs=1e-12)


# ----------------------------------------------------------------------------- words, formulas, chapters

GREEK = {r"\rho": "ρ", r"\theta": "θ", r"\Delta": "Δ", r"\varepsilon": "ε", r"\sigma": "σ", r"\Omega": "Ω",
         r"\lambda": "λ", r"\mathbb{E}": "E", r"\hat{f}": "f̂"}
LETTER = "A-Za-zα-ωΑ-Ω"


def identifiers(latex: str) -> set[str]:
    """The one-letter symbols of a LaTeX line (Latin or Greek; words in \\mathrm or \\text are not symbols)."""
    for command, letter in GREEK.items():
        latex = latex.replace(command, f" {letter} ")
    latex = re.sub(r"\\(mathrm|text)\{[^}]*\}", " ", latex)
    latex = re.sub(r"\\[A-Za-z]+", " ", latex)
    return set(re.findall(rf"(?<![{LETTER}])[{LETTER}]̂?(?![{LETTER}])", latex))


def defined(ch: lab.Chapter) -> list[str]:
    """What the chapter's visible glossary lines define: each clause's head ('x^(⊕i)' in 'x^(⊕i): the input ...'),
    and a glossary term's symbol ('as_n(f)' in 'average sensitivity (as_n(f)): ...')."""
    found = []
    for line in (*ch.definitions(), *ch.symbols, *ch.theorem_symbols):
        for clause in line.split("; "):
            if ":" in clause:
                head = clause.split(":")[0].strip()
                found += [head, *re.findall(r"\(([^()]*(?:\([^()]*\))?[^()]*)\)", head)]
    return found


def test_every_symbol_of_a_chapters_formulas_is_defined_in_its_words_and_symbols():
    """C and H (chapter 3), L, d, Ω(d), e (chapter 4), λ_P (chapter 1): each letter of a formula or theorem is the
    head of a line of the chapter's words and symbols, shown on the page and in the handout."""
    assert identifiers(r"C \mathbb{E}[\mathrm{Blowup}^2] \ge \frac{H}{n}") == {"C", "E", "H", "n"}
    missing = []
    for ch in lab.CHAPTERS:
        heads = defined(ch)
        for line in (*ch.formula, *ch.theorem):
            missing += [(ch.number, c) for c in identifiers(line)
                        if not any(re.match(rf"{re.escape(c)}(?![{LETTER}])", h) for h in heads)]
    assert not missing
    one = lab.chapter(1)
    assert {"cube", "Gray order", "λ_P"} <= set(defined(one))
    assert {"C", "H"} <= set(defined(lab.chapter(3))) and {"L", "d", "Ω(d)"} <= set(defined(lab.chapter(4)))
    for ch in lab.CHAPTERS:  # a measured quantity a chart's title names is defined too (chapter 4's loss, third walk)
        titles = " ".join(f.title + " " + f.blind_title for f in ch.present(data(ch.number), ch.control.default).figures)
        named = {w for w in ("loss", "accuracy", "sharpness", "Blowup", "as_n", "d_k") if re.search(rf"\b{w}\b", titles)}
        assert all(any(w in head for head in defined(ch)) for w in named), (ch.number, named)


def contrast(colour: str, background: str = "#ffffff") -> float:
    """WCAG's contrast ratio of two #rrggbb colours."""
    def luminance(hex_: str) -> float:
        channels = [int(hex_[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        return sum(w * (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
                   for w, c in zip((0.2126, 0.7152, 0.0722), channels))
    high, low = sorted((luminance(colour), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_every_charts_text_is_14_px_or_more_and_dark_enough():
    """Tick labels, axis and legend titles and text marks at least 14 px, and labels and titles at least 4.5:1 against
    white, in every chapter's charts and blind charts (a size or colour set on one axis, legend or mark overrides the
    chart's own)."""
    assert contrast("#333333") > 12 and contrast("#888888") < 4.5
    for ch in lab.CHAPTERS:
        for fig in ch.present(data(ch.number), ch.control.default).figures:
            for chart in (fig.chart, fig.blind):
                if chart is None:
                    continue
                stack, spec = [chart.to_dict()], chart.to_dict()
                config = spec["config"]
                for part in ("axis", "legend", "header"):
                    assert config[part]["labelFontSize"] >= 14 and contrast(config[part]["labelColor"]) >= 4.5
                    assert config[part]["titleFontSize"] >= 14 and contrast(config[part]["titleColor"]) >= 4.5
                while stack:
                    node = stack.pop()
                    if isinstance(node, list):
                        stack += node
                    elif isinstance(node, dict):
                        for key, value in node.items():
                            if key in ("labelFontSize", "titleFontSize") or key == "fontSize" and node.get("type") == "text":
                                assert value >= 14, (ch.number, fig.key, key, value)
                            if key in ("labelColor", "titleColor") and isinstance(value, str):
                                assert contrast(value) >= 4.5, (ch.number, fig.key, key, value)
                            stack.append(value)


def test_every_chapter_defines_its_terms_from_the_glossary():
    needed = {"PARITY", "FIRST", "MAJORITY", "MEAN", "sensitivity", "average sensitivity", "Fourier degree",
              "LayerNorm factor", "Blowup", "sharpness", "radius", "sharpness proxy", "convergence filter"}
    used = {t for ch in lab.CHAPTERS for t in ch.terms}
    assert needed <= used
    for ch in lab.CHAPTERS:
        assert all(line.split(":")[0] in {t.name for t in glossary.TERMS} or "(" in line for line in ch.definitions())
    with pytest.raises(KeyError, match="no glossary term"):
        glossary.term("entropy")


def test_the_question_and_prediction_do_not_hold_the_answer():
    for ch in lab.CHAPTERS:
        built = ch.present(data(ch.number), ch.control.default)
        before = " ".join([ch.question, ch.predict.prompt, *ch.definitions(), *(f.title for f in built.figures)])
        settings = {f"{built.numbers['rho']:.3g}"} if "rho" in built.numbers else set()  # the radius is a setting
        numbers = set(re.findall(r"\d+\.\d+", built.look_for)) - settings
        assert not any(number in before for number in numbers), ch.slug
        assert built.correct in ch.predict.options


def test_formulas_are_mathml():
    out = mathml(r"\frac{1}{\sqrt{\sigma^2+\varepsilon}}")
    assert "<mfrac><mn>1</mn><msqrt>" in out and "σ" in out and "ε" in out
    assert "<msubsup><mi>N</mi><mi>i</mi>" in mathml(r"N_i^{(k)}")
    limit = mathml(r"\liminf_{n\to\infty} L - e^{-d}")  # as a displayed formula sets it: the limit under, a minus
    assert limit.startswith('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><mrow><munder><mi>lim inf')
    assert '</munder><mspace width="0.17em"/><mi>L</mi><mo>−</mo>' in limit and "<mo>-</mo>" not in limit
    assert "<munderover><mo>∑</mo>" in mathml(r"\sum_{i=1}^{n} x_i")
    assert "<msub><mi>a</mi><mi>max</mi></msub>" in mathml(r"a_{\max}")  # a script's function: no space, two children
    assert "mspace" not in mathml(r"\log(x)") and "mspace" not in mathml(r"\max_i (1+N)")  # none before a bracket
    for ch in lab.CHAPTERS:
        assert all("\\" not in mathml(line) for line in ch.formula), ch.slug


def test_chapter_numbers_are_checked():
    assert lab.chapter(3).slug == "blowup"
    for bad in (0, 8, "2", True):
        with pytest.raises(ValueError, match="chapters 1..7"):
            lab.chapter(bad)


# ----------------------------------------------------------------------------- the handout


def test_the_page_fill_of_a_pdf_is_measured_from_its_marks():
    """pdf_fill on PDFs built here: a mark at a known depth, a white fill and a clip that do not count."""
    def pdf(content: bytes) -> bytes:
        stream = zlib.compress(content)
        return (b"%PDF-1.4\n1 0 obj\n<</Type /Page\n/MediaBox [0 0 600 800]\n/Contents 2 0 R>>\nendobj\n"
                + f"2 0 obj\n<</Filter /FlateDecode /Length {len(stream)}>> stream\n".encode() + stream
                + b"\nendstream\nendobj\n")

    flip = b"1 0 0 -1 0 800 cm\n"
    assert page_fill(pdf(flip + b"0 0 0 rg 10 100 50 100 re f")) == pytest.approx([0.25])
    assert page_fill(pdf(flip + b"1 1 1 rg 0 0 600 800 re f 0 0 0 rg 10 10 5 5 re f")) == pytest.approx([15 / 800])
    assert page_fill(pdf(flip + b"0 0 600 800 re W n q 1 0 0 1 0 400 cm BT 1 0 0 -1 0 0 Tm ET Q")) == pytest.approx([0.5])


def test_chapter_2_draws_the_students_run_over_the_zoos():
    ck = lab.zoo_loader(ROOT / "checkpoints")("encoder-parity-n8")
    records = ck.metadata["extra"]["measurements"][:3]  # a run three measurements in
    fig = lab.your_run(data(2), lab.SHARPNESS, records)
    drawn = pd.concat(frame for _, frame in views(fig.chart))
    assert set(drawn["run"]) == {lab.ZOO_RUN, lab.YOUR_RUN} and set(drawn["metric"]) == {"accuracy", lab.SHARPNESS}
    assert drawn[drawn["run"] == lab.YOUR_RUN]["step"].nunique() == 3 and "3 measurements" in fig.caption


# ----------------------------------------------------------------------------- words and settings

INTERNAL = ("decide-scale", "decide scale", "relax arm", "pre-registered", "preregistered", "sensviz.", "zoo",
            "kept runs", "shipped", "fidelity", "arm:")
"""Words a student does not have: the project's own (its scales, arms, modules, the 'zoo')."""


def test_no_chapter_speaks_the_projects_own_words():
    for ch in lab.CHAPTERS:
        fixed = [ch.title, ch.question, ch.predict.prompt, *ch.predict.options, ch.try_it, *ch.definitions(),
                 *ch.symbols, *ch.theorem_symbols, ch.control.label, *(ch.control.fmt(o) for o in ch.control.options)]
        for choice in ch.control.options:
            built = ch.present(data(ch.number), choice)
            shown = [*fixed, built.look_for, built.answer, *built.claims.values()]
            shown += [f"{f.title} {f.blind_title} {f.caption} {json.dumps(f.chart.to_dict(), ensure_ascii=False)}"
                      for f in built.figures]
            found = [w for w in INTERNAL for line in shown if w in line.lower()]
            assert not found, (ch.number, choice, found)


def test_chapter_2s_try_it_options_each_draw_the_curve_they_name():
    labels = {lab.SHARPNESS: "sharpness", "as_n(model)": "as_n", "loss": "loss", "param_norm": "θ", "Blowup": "Blowup"}
    assert set(lab.chapter(2).control.options) == set(labels)
    for option, word in labels.items():
        fig = lab.chapter(2).present(data(2), option).figures[1]
        drawn = set(pd.concat(frame for _, frame in views(fig.chart))["metric"])
        assert drawn == {"accuracy", lab.CURVES[option]} and word in fig.title, option
        blind = set(pd.concat(frame for _, frame in views(fig.blind))["metric"]) - {"accuracy"}  # before the reveal
        title = fig.blind_title or fig.title
        assert lab.SHARPNESS not in blind and len(blind) == 1 and f"accuracy and {blind.pop()} over" in title, option


def test_the_answer_is_decided_at_the_questions_setting_and_other_settings_say_what_they_show():
    ch = lab.chapter(3)
    asked = ch.present(data(3), ch.control.default)
    for n in ch.control.options:
        here = ch.present(data(3), n)
        said = lab.what_changes(ch, asked, here, n)
        assert here.look_for in said and f"n = {n}" in said
        assert ("not visible at this setting" in said) == (here.correct != asked.correct), n
        assert (ch.rule in said) == (here.correct != asked.correct), n  # the rule stated where it is used
    # the rule on altered data: factors as large at n = 8 as at 12 show the same answer there
    same = altered(3, "layers", lambda t: t.assign(mean_N=np.where(t["model"] == "PARITY", 3.0, 1.0)))
    assert "the same answer" in lab.what_changes(ch, asked, ch.present(same, 8), 8)


def test_the_models_and_tasks_of_every_chart_differ_in_dash_and_shape_not_only_colour():
    """On a greyscale print PARITY and FIRST are two greys: every line, step or bar coloured by model or task is
    also dashed by it, and its points shaped by it, each with its own dash and shape."""
    checked = 0
    for ch in lab.CHAPTERS:
        for fig in ch.present(data(ch.number), ch.control.default).figures:
            stack = [fig.chart.to_dict()]
            while stack:
                node = stack.pop()
                if isinstance(node, list):
                    stack += node
                    continue
                if not isinstance(node, dict):
                    continue
                stack += list(node.values())
                mark = node.get("mark", {})
                mark = mark.get("type") if isinstance(mark, dict) else mark
                colour = node.get("encoding", {}).get("color", {})
                if mark not in ("line", "bar") or colour.get("field") not in ("model", "task"):
                    continue
                dash = node["encoding"].get("strokeDash", {})
                assert dash.get("field") == colour["field"], (ch.number, fig.key)
                assert len({str(d) for d in dash["scale"]["range"]}) == len(dash["scale"]["domain"]), (ch.number, fig.key)
                if mark == "line":
                    shape = node["encoding"]["shape"]
                    assert shape["field"] == colour["field"]
                    assert len(set(shape["scale"]["range"])) == len(shape["scale"]["domain"])
                checked += 1
    assert checked >= 5  # chapters 1, 3, 4 (two), 5


def test_a_strips_axis_spans_every_possible_as_n_and_no_two_kinds_share_a_colour():
    """Chapters 6 and 7: the axis runs from 0 to n with or without the hidden mark (its extent hints at nothing) and
    leaves room for a mark at n (chapter 7's trained PARITY model); each kind of function has its own colour and shape."""
    for number in (6, 7):
        ch = lab.chapter(number)
        built = ch.present(data(number), ch.control.default)
        n = built.numbers["n"]
        for chart in (built.figures[0].chart, built.figures[0].blind):
            spec = chart.to_dict()
            x, colour, shape = (spec["encoding"][k]["scale"] for k in ("x", "color", "shape"))
            assert x["domain"] == [0, n] and x["padding"] >= 7  # half a mark's width beyond n
            kinds = set(views(chart)[0][1]["function"])
            assert kinds <= set(colour["domain"]) == set(shape["domain"])
            assert len(set(colour["range"])) == len(colour["domain"]) == len(set(shape["range"]))


def test_a_try_it_setting_that_changes_only_the_curve_says_what_that_curve_does():
    """Chapter 2's curve and chapter 5's tasks: 'what changes here' describes the curve picked, from its data, not
    the question's paragraph again; on altered data it says something else."""
    ch = lab.chapter(2)
    asked = ch.present(data(2), lab.SHARPNESS)
    for option, metric in lab.CURVES.items():
        here = ch.present(data(2), option)
        said = lab.what_changes(ch, asked, here, option)
        line = data(2).tables["curves"].query("metric == @metric").sort_values("step")
        assert asked.look_for not in said and f"is {metric}: {line['value'].iloc[0]:.3g} at step 0" in said, option
    flat = altered(2, "curves", lambda t: t.assign(value=np.where(t["metric"] == "loss", 0.25, t["value"])))
    assert "stays about the same" in ch.present(flat, "loss").here
    five = lab.chapter(5)
    four = five.present(data(5), "all four tasks")
    assert all(f"{name}'s mean proxy ×4" in four.here for name in ("PARITY", "FIRST", "MAJORITY", "MEAN"))
    assert four.here != five.present(data(5), "PARITY and FIRST").here
    assert five.rule and all(c.rule for c in lab.CHAPTERS)


def test_chapter_5_says_how_its_points_stand_to_the_theorems_bound():
    built = lab.chapter(5).present(data(5), "PARITY and FIRST")
    means = data(5).tables["points"].query("task == 'parity'")["mean"]
    assert (means < lab.BOUND).all() and f"({means.min():.2g} to {means.max():.2g}) is below" in built.answer
    high = altered(5, "points", lambda t: t.assign(mean=np.where(t["n"] == t["n"].max(), 0.6, t["mean"])))
    again = lab.chapter(5).present(high, "PARITY and FIRST")
    assert f"At n = {int(data(5).tables['points']['n'].max())} the PARITY mean reaches" in again.answer


def test_chapter_6_compares_its_guesses_with_a_coin_flip_by_two_standard_errors():
    assert lab.guess_words(0.57, 192).startswith("within two standard errors")  # 2 s.e. = 7.2 points
    assert lab.guess_words(0.60, 192).startswith("more than two standard errors (7% points) above")
    built = lab.chapter(6).present(data(6), lab.FEW_COMPARE[0])
    assert built.claims["guess"] in built.look_for and "constant guess" not in built.look_for
    assert "sharpness L_ρ from" in built.look_for  # the second chart in words


def test_chapter_5s_chart_has_one_legend_of_the_tasks_and_one_of_the_single_models():
    """The tasks' shape is not listed a second time, nor merged with the single models' diamonds."""
    for tasks in lab.chapter(5).control.options:
        spec = lab.chapter(5).present(data(5), tasks).figures[0].chart.to_dict()
        legends = [(layer["encoding"][k].get("title"), k) for layer in spec["layer"] for k in ("color", "shape", "strokeDash")
                   if k in layer["encoding"] and layer["encoding"][k].get("legend", {}) is not None]
        assert spec["resolve"]["scale"]["shape"] == "independent"
        assert {title for title, _ in legends} == {"task", "single models"} and ("task", "shape") not in legends, tasks


def test_chapter_5s_chart_keeps_a_students_model_inside_its_width_and_visible_on_the_pretrained_one():
    """A student's model with a long name: the single models' legend goes below the plot, so the chart drawn by Vega at
    the Lab's 1024 px column keeps its width (two legends side by side at the top ran past it, cutting the name); the
    student's model has a fill of its own, so a model trained like the pretrained one (the same point) still shows."""
    import vl_convert

    yours = pd.DataFrame([{"model": "your model: parity-n8-encoder-d16-seed1", "task": "parity", "n": 8, "value": 0.14}])
    spec = lab.chapter(5).present(data(5), "all four tasks", yours).figures[0].chart.to_dict()
    svg = vl_convert.vegalite_to_svg({**spec, "width": WINDOWS[1024]}, vl_version="6.4")
    assert float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1)) <= WINDOWS[1024] + 1
    assert "parity-n8-encoder-d16-seed1" in svg  # the name is drawn whole, not cut with an ellipsis
    single = spec["layer"][2]["encoding"]
    assert single["shape"]["legend"]["orient"] == "bottom" and single["fill"]["legend"] == single["shape"]["legend"]
    fills = dict(zip(single["fill"]["scale"]["domain"], single["fill"]["scale"]["range"]))
    assert fills[lab.PRETRAINED] != fills[yours["model"][0]]


def test_chapter_3s_histogram_draws_its_last_bin_as_wide_as_the_others():
    built = lab.chapter(3).present(data(3), 12)
    drawn = views(built.figures[1].chart)[0][1]
    for model, rows in built.figures[1].data.groupby("model"):
        line = drawn[drawn["model"] == model].sort_values("log10_start")
        assert len(line) == len(rows) + 1 and line["log10_start"].iloc[-1] == rows["log10_end"].max()
        last = rows.sort_values("log10_start")["fraction"].iloc[-1]
        assert line["fraction"].iloc[-1] == 0 and line["fraction"].iloc[-2] == last


def test_chapter_3_compares_in_words_that_read_and_names_the_questions_length():
    ch = lab.chapter(3)
    assert f"n = {ch.control.default} bits" in ch.predict.prompt  # the answer can flip at another n: the question says which
    same = altered(3, "layers", lambda t: t.assign(mean_N=1.0))
    built = ch.present(same, ch.control.default)
    assert built.claims["factors"] == "about the same" and "about the same as the FIRST model's" in built.look_for
    assert "than the FIRST model's" in ch.present(data(3), ch.control.default).look_for
    first = built.figures[0].data["ln_name"].iloc[0]
    assert f"({first} is the first)" in built.figures[0].caption  # the caption names the LayerNorm as the axis does


# ----------------------------------------------------------------------------- tick labels that never touch

WINDOWS = {1024: 564, 1280: 747}
"""The width Streamlit stretches a single or layered chart to (the Lab's column, measured in Chromium) per window width."""
DEJAVU_EM = {**dict.fromkeys("0123456789", 0.636), ".": 0.318, ",": 0.318, "−": 0.838, "-": 0.361, " ": 0.318,
             "e": 0.615, "+": 0.838, "%": 0.950, "k": 0.579, "M": 0.863}
"""Advance widths of DejaVu Sans (the browsers' 'sans-serif' here, the widest of the usual ones) in em; other characters 0.7."""


def all_views(spec: dict) -> list[dict]:
    """Every view of a spec (the spec itself, its layers, its concatenated and faceted views), nested ones too."""
    found, stack = [], [spec]
    while stack:
        node = stack.pop()
        found.append(node)
        stack += [node["spec"]] if "spec" in node else []
        stack += [v for key in ("layer", "concat", "hconcat", "vconcat") for v in node.get(key, [])]
    return found


def views_of(spec: dict) -> list[dict]:
    """The single or layered views of a compound chart's spec."""
    inner = [spec["spec"]] if "spec" in spec else [v for key in ("concat", "hconcat", "vconcat") for v in spec.get(key, [])]
    return [w for v in inner for w in (views_of(v) if {"spec", "concat", "hconcat", "vconcat"} & v.keys() else [v])]


def text_px(text: str, size: float) -> float:
    return sum(DEJAVU_EM.get(c, 0.7) for c in text) * size


def continuous_x_labels(svg: str) -> list[list[tuple[float, float, str]]]:
    """Per continuous x axis of a rendered chart (Vega's SVG), every tick label's extent (left, right, text), shown or
    hidden by Vega's overlap rule (the browser's own text metrics may keep labels Vega hid here)."""
    import xml.etree.ElementTree as ET

    ns = "{http://www.w3.org/2000/svg}"
    axes = []
    for group in ET.fromstring(svg).iter(f"{ns}g"):
        label = group.get("aria-label", "")
        if "role-axis" not in group.get("class", "") or not label.startswith("X-axis") or not re.search(
                r"for a (linear|log|pow|sqrt|symlog) scale", label):
            continue
        found = []
        for part in group.iter(f"{ns}g"):
            if "role-axis-label" not in part.get("class", ""):
                continue
            for t in part.iter(f"{ns}text"):
                if not (t.text or "").strip():  # a log axis's unlabelled ticks
                    continue
                x = float(re.search(r"translate\(([-\d.e]+)", t.get("transform")).group(1))
                width = text_px(t.text or "", float(t.get("font-size", "14px").rstrip("px")))
                left = {"start": x, "end": x - width}.get(t.get("text-anchor"), x - width / 2)
                found.append((left, left + width, t.text))
        axes.append(sorted(found))
    return axes


def test_every_lab_charts_x_ticks_follow_its_width_and_their_labels_never_touch():
    """The rule (`lab_charts.ticks`): every chart's x axis has at most one tick per `TICK_PX` of the plot's width (an
    expression of its drawn width where Streamlit stretches it, else of its narrowest view's) and Vega's overlap
    removal on with `LABEL_GAP_PX` between labels. Checked on each chapter's charts and blind charts at every try-it
    setting; the charts drawn by Vega (vl-convert) at the widths Streamlit gives them in 1024 and 1280 px windows: on
    every continuous x axis the tick labels, hidden or not, lie at least `LABEL_GAP_PX` apart at the browser font's
    widths, and there are at least two (a width signal of a wrong name draws none). A blind chart has its chart's
    x axes (the same fields and scales), so it is not drawn again."""
    import vl_convert

    from sensviz import lab_charts

    assert 34.1 - text_px("−4.5", 14) < lab_charts.LABEL_GAP_PX  # 34.1 px apart: Vega-Lite's default at 1280 px
    drawn = 0
    for ch in lab.CHAPTERS:
        shipped = data(ch.number)
        for choice in ch.control.options:
            for fig in ch.present(shipped, choice).figures:
                specs = [c.to_dict() for c in (fig.chart, fig.blind) if c is not None]
                for spec in specs:
                    config = spec["config"]
                    assert config["axis"]["labelOverlap"] is True, (ch.number, fig.key)
                    assert config["axis"]["labelSeparation"] >= lab_charts.LABEL_GAP_PX > 0
                    count = config["axisX"]["tickCount"]
                    if "autosize" in spec:  # a single or layered chart, stretched to its column
                        assert count == {"expr": f"ceil(width / {lab_charts.TICK_PX})"}, (ch.number, fig.key)
                    else:  # a compound chart's views keep their widths: at most one tick per TICK_PX of the narrowest
                        narrowest = min(v["width"] for v in views_of(spec))
                        assert 2 <= count <= max(2, math.ceil(narrowest / lab_charts.TICK_PX)), (ch.number, fig.key)
                xs = [sorted(json.dumps(v.get("encoding", {}).get("x"), sort_keys=True) for v in all_views(spec))
                      for spec in specs]
                assert all(set(x) == set(xs[0]) for x in xs), (ch.number, fig.key)  # the blind chart's x axes: the chart's
                if '"type": "quantitative"' not in "".join(xs[0]):
                    continue  # no continuous x axis: its ticks are its categories, thinned by labelOverlap alone
                for width in WINDOWS.values() if "autosize" in specs[0] else (None,):
                    svg = vl_convert.vegalite_to_svg({**specs[0], "width": width} if width else specs[0], vl_version="6.4")
                    for labels in continuous_x_labels(svg):
                        assert len(labels) >= 2, (ch.number, choice, fig.key, width, labels)
                        gaps = [b[0] - a[1] for a, b in zip(labels, labels[1:])]
                        assert min(gaps) >= lab_charts.LABEL_GAP_PX - 0.5, (ch.number, choice, fig.key, width, labels)
                        drawn += 1
    assert drawn >= 40


# ----------------------------------------------------------------------------- a series looks the same everywhere

STYLED = ("color", "shape", "strokeDash")


def rgb_distance(a: str, b: str) -> float:
    """How far apart two #rrggbb colours are (Euclidean, 0..441): PARITY's #b2182b and a bar's #d62728 are 39 apart."""
    return math.dist(*([int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in (a, b)))


def series_styles(spec: dict) -> dict[tuple[str, str], str]:
    """What each series of a chart's spec is drawn with: (channel, the series' label) -> its colour, shape or dash,
    from every view's fixed scale (a channel on a nominal field without a domain and range fails: Vega would
    colour by its own order, which changes with the series shown). The values of a field drawn outside the domain fail."""
    found = {}
    for view in all_views(spec):
        for channel in STYLED:
            enc = view.get("encoding", {}).get(channel)
            if not enc or enc.get("type") != "nominal":
                continue
            scale = enc.get("scale", {})
            assert "domain" in scale and "range" in scale, (channel, enc.get("field"))
            for value, style in zip(scale["domain"], scale["range"]):
                found[(channel, str(value))] = json.dumps(style)
    return found


def test_a_series_keeps_its_colour_shape_and_dash_across_the_reveal_and_the_chapters_charts():
    """Before the reveal (a blind chart) and after it, and from one chart of a chapter to the next, a series (a model,
    task or kind of function, by its label) keeps its colour, shape and dash: each is a fixed domain -> range mapping,
    not Vega's order of appearance (chapter 7's series changed colour at the reveal on the third walk); and within a
    chapter a colour stands for one series only (chapter 7's L_ρ bars were in PARITY's red)."""
    blinds = 0
    for ch in lab.CHAPTERS:
        shipped = data(ch.number)
        for choice in ch.control.options:
            seen: dict[tuple[str, str], tuple[str, str]] = {}
            for fig in ch.present(shipped, choice).figures:
                for state, chart in (("after", fig.chart), ("before", fig.blind)):
                    if chart is None:
                        continue
                    blinds += state == "before"
                    spec = chart.to_dict()
                    rows = [row for table in spec.get("datasets", {}).values() for row in table]  # what it draws
                    drawn = {str(row[c]) for row in rows for c in ("model", "task", "function", "quantity") if c in row}
                    styles = series_styles(spec)
                    fields = {enc.get("field") for view in all_views(spec) for c in STYLED
                              if (enc := view.get("encoding", {}).get(c)) and enc.get("type") == "nominal"}
                    labelled = {str(row[c]) for row in rows for c in fields if row.get(c) is not None}
                    assert labelled <= {label for _, label in styles}, (ch.number, fig.key, labelled)
                    for key, style in styles.items():
                        if key[1] in drawn:
                            first = seen.setdefault(key, (style, f"{fig.key} {state}"))
                            assert first[0] == style, (ch.number, choice, key, first, fig.key, state, style)
            colours = [(json.loads(style), label) for (channel, label), (style, _) in seen.items() if channel == "color"]
            for (a, one), (b, other) in itertools.combinations(colours, 2):  # one series per colour, told apart
                assert rgb_distance(a, b) >= 60, (ch.number, choice, one, a, other, b)
    assert blinds >= 8


def test_chapter_6_says_what_its_comparison_functions_are_at_each_setting():
    """The strip's caption names the functions drawn beside the learned one: completions agree with the training
    data, uniformly random functions ignore it."""
    ch = lab.chapter(6)
    captions = {option: next(f.caption for f in ch.present(data(6), option).figures if f.key == "few_as")
                for option in ch.control.options}
    assert "agree with the target on the training inputs" in captions[lab.FEW_COMPARE[0]]
    assert "ignore the training inputs" in captions[lab.FEW_COMPARE[1]]


def test_chapter_2s_blowup_curve_is_described_by_the_fold_of_blowup_not_of_its_logarithm():
    """E[log Blowup] is a logarithm: its change is e^(mean after − mean before), the fold of Blowup's geometric mean
    (a ratio of two logarithms' means says nothing); a curve that steps up 1.1-fold or more is not 'about the same'."""
    built = lab.chapter(2).present(data(2), "Blowup")
    step = built.numbers["step"]
    line = data(2).tables["curves"].query("metric == 'E[log Blowup]'")
    fold = np.exp(line[line["step"] >= step]["value"].mean() - line[line["step"] < step]["value"].mean())
    said = lab.what_changes(lab.chapter(2), lab.chapter(2).present(data(2), lab.SHARPNESS), built, "Blowup")
    word = "rises" if fold > lab.CURVE_FOLD else "falls" if fold < 1 / lab.CURVE_FOLD else None
    assert (f"{word} {fold:.2g}-fold" if word else "stays about the same") in said, said
    flat = altered(2, "curves", lambda t: t.assign(value=np.where(t["metric"] == "E[log Blowup]", 3.0, t["value"])))
    assert "geometric mean (e^E[log Blowup]) stays about the same" in lab.chapter(2).present(flat, "Blowup").here


def test_chapter_3s_bars_label_every_layernorm_at_the_labs_width():
    """Each LayerNorm's short name (the shared prefix "encoders.layers." dropped) drawn by Vega with its label shown:
    the full module names, rotated, lost two of the four to Vega's overlap removal at 1024 px."""
    import vl_convert

    from sensviz import charts

    built = lab.chapter(3).present(data(3), 12)
    names = charts.short_names(built.figures[0].data.sort_values("ln")["ln_name"])
    assert list(names.values()) == ["layer 0 norm1", "layer 0 norm2", "layer 1 norm1", "layer 1 norm2"]
    svg = vl_convert.vegalite_to_svg(built.figures[0].chart.to_dict(), vl_version="6.4")
    shown = re.findall(r'<text[^>]*opacity="1"[^>]*>(layer \d norm\d)</text>', svg)
    assert sorted(shown) == sorted(names.values()), shown


def test_chapter_5s_caption_says_what_the_pretrained_single_models_do_from_their_points():
    built = lab.chapter(5).present(data(5), "PARITY and FIRST")
    zoo = data(5).tables["zoo"].sort_values("n")
    assert lab.trend_words(zoo["n"], zoo["value"]) in built.figures[0].caption
    assert "scatters" in built.figures[0].caption  # the shipped ones go down, then up
    rising = altered(5, "zoo", lambda t: t.assign(value=t["n"] / 100))
    caption = lab.chapter(5).present(rising, "PARITY and FIRST").figures[0].caption
    assert "The pretrained ones' proxy ×4 rises with n at every step" in caption and "scatters" not in caption
    falling = altered(5, "zoo", lambda t: t.assign(value=1 / t["n"]))
    assert "scatters" not in lab.chapter(5).present(falling, "PARITY and FIRST").figures[0].caption
