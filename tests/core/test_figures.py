"""Figures from small fixed result tables: the data and encodings of each chart spec (not pixels)."""

import math
import re

import pandas as pd
import pytest
from helpers.core import length_runs, walk

from sensviz import figures, results
from sensviz.experiments import dynamics, length_scaling, scratchpad


def chart_data(chart) -> list[dict]:
    spec = chart.to_dict()
    return next(iter(spec["datasets"].values()))


def test_length_scaling_means_over_converged_seeds_and_the_note():
    (fig,) = results.figures("length_scaling", length_runs(), pd.DataFrame())
    table = fig.data
    assert set(table["metric"]) == set(length_scaling.METRICS.values())
    proxy = table[table["metric"] == length_scaling.METRICS["sharpness_proxy_pm1"]].set_index(["task", "n"])
    assert proxy.loc[("parity", 4), "mean"] == pytest.approx(0.405)  # seeds 0 and 1: 0.40, 0.41
    assert proxy.loc[("parity", 4), "stderr"] == pytest.approx(0.005)
    assert proxy.loc[("parity", 8), "mean"] == pytest.approx(0.8) and proxy.loc[("parity", 8), "count"] == 1
    assert "7 of 8 finished runs kept" in fig.note and "task=parity n=8 ×1" in fig.note and "1 run(s) failed" in fig.note
    spec = fig.chart.to_dict()
    assert spec["facet"]["field"] == "metric" and spec["resolve"]["scale"]["y"] == "independent"
    layers = spec["spec"]["layer"]
    assert layers[0]["encoding"]["x"]["field"] == "n" and layers[0]["encoding"]["color"]["field"] == "task"
    assert layers[0]["encoding"]["y"]["field"] == "mean"
    assert layers[1]["mark"]["type"] == "errorbar" and layers[1]["encoding"]["y2"]["field"] == "high"
    assert len(chart_data(fig.chart)) == len(table) == 4 * 6


def test_tradeoff_points_per_converged_run_and_the_bound():
    scatter, bound = results.figures("tradeoff", length_runs(), pd.DataFrame())
    assert len(scatter.data) == 2 * 7  # two blowup definitions per kept run
    assert set(scatter.data["blowup"]) == {"ours: log E[Blowup(x)²]", "published code: log mean Π max 1/std"}
    ours = scatter.data[scatter.data["blowup"].str.startswith("ours")].set_index("run_id")
    assert ours.loc["parity80", "log_blowup"] == pytest.approx(8 / 5)
    spec = scatter.chart.to_dict()
    assert spec["facet"]["column"]["field"] == "blowup" and spec["facet"]["row"]["field"] == "n"  # two wide
    assert spec["spec"]["encoding"]["y"]["field"] == "param_norm"
    assert spec["spec"]["encoding"]["x"]["field"] == "log_blowup"
    rhs = bound.data.set_index(["task", "n"])["mean"]
    assert rhs[("parity", 8)] == pytest.approx(0.8)  # the failed run has no metrics, the unconverged one counts
    assert bound.chart.to_dict()["encoding"]["y"]["field"] == "mean"


def test_dynamics_lines_per_run_and_thinning():
    runs = pd.DataFrame({"run_id": ["a", "b"], "seed": [0, 0], "weight_decay": [0.0, 0.3],
                         "status": "finished", "converged": [True, True]})
    steps = range(0, 1001, 10)
    history = pd.DataFrame([{"run_id": r, "step": s, "loss": 10.0 ** (-s / 250), "sharpness_proxy_pm1": s / 1000,
                             "sharpness_limit_pm1": 0.1, "log_authors_blowup": 1.0, "log_blowup_mean": 2.0,
                             "param_norm": 30 - s / 100} for r in "ab" for s in steps])
    (fig,) = results.figures("dynamics", runs, history)
    loss = fig.data[fig.data["metric"] == dynamics.METRICS["log10_loss"]]
    assert loss[loss["step"] == 500]["value"].tolist() == pytest.approx([-2.0, -2.0])
    assert len(fig.data) == 2 * len(steps) * 6 and len(fig.data) < figures.MAX_ROWS
    encoding = fig.chart.to_dict()["spec"]["encoding"]
    assert encoding["detail"]["field"] == "run_id" and encoding["color"]["field"] == "weight_decay"
    long_history = pd.concat([history.assign(run_id=r) for r in "abcdefgh"])
    many = dynamics.figures(pd.DataFrame({"run_id": list("abcdefgh"), "seed": 0, "weight_decay": 0.1,
                                          "status": "finished", "converged": True}), long_history)[0]
    assert len(many.data) <= figures.MAX_ROWS and 1000 in set(many.data["step"])  # thinned, the last step kept


def test_dynamics_fills_settings_left_at_their_defaults():
    runs = pd.DataFrame({"run_id": ["a"], "status": "finished", "converged": [True]})  # no seed, no weight_decay
    history = pd.DataFrame({"run_id": ["a", "a"], "step": [0, 10], "loss": [0.3, 0.1], "param_norm": [3.0, 2.0]})
    (fig,) = results.figures("dynamics", runs, history)
    assert set(fig.data["weight_decay"]) == {0.1} and set(fig.data["seed"]) == {0}
    with pytest.raises(ValueError, match="no per-step measurements"):
        results.figures("dynamics", runs, pd.DataFrame())


def test_scratchpad_labels_and_log_x():
    runs = pd.DataFrame([{"run_id": f"{a}{n}", "arch": a, "n": n, "status": "finished", "converged": True,
                          "sharpness_proxy_pm1": 0.1 if a == "scratchpad" else 0.05 * n, "param_norm": 10.0}
                         for a in ("scratchpad", "encoder") for n in (4, 8, 16)])
    (fig,) = results.figures("scratchpad", runs, pd.DataFrame())
    assert set(fig.data["model"]) == {"with scratchpad", "without (encoder)"}
    spec = fig.chart.to_dict()
    assert spec["spec"]["layer"][0]["encoding"]["x"]["scale"] == {"type": "log", "base": 2}
    proxy = fig.data[fig.data["metric"] == scratchpad.METRICS["sharpness_proxy_pm1"]].set_index(["model", "n"])
    assert proxy.loc[("without (encoder)", 16), "mean"] == pytest.approx(0.8)


def test_generalization_compares_learned_with_completions_and_plots_sharpness():
    rows = []
    for size in (32, 128):
        for seed in (0, 1):
            rows.append({"run_id": f"{size}-{seed}", "n": 8, "train_size": size, "seed": seed, "status": "finished",
                         "converged": True, "as_learned": 2.0 + size / 64, "as_completion_mean": 4.0,
                         "as_target": 4.0 + seed / 10, "as_completion_retrained": 3.9,
                         "learned_converged": seed == 0, "completion_converged": True,
                         "learned_sharpness_proxy_pm1": 0.05, "completion_sharpness_proxy_pm1": 0.2,
                         "learned_sharpness_limit_pm1": 0.01, "completion_sharpness_limit_pm1": 0.02})
    compare, sharp = results.figures("generalization", pd.DataFrame(rows), pd.DataFrame())
    means = compare.data.set_index(["train_size", "metric"])["mean"]
    assert means[(32, "learned by the transformer")] == pytest.approx(2.5)
    assert means[(128, "random completions of the same data")] == pytest.approx(4.0)
    spec = compare.chart.to_dict()
    rule = spec["layer"][2]
    assert rule["mark"]["type"] == "rule" and spec["datasets"][rule["data"]["name"]] == [{"half": 4.0}]  # n/2
    assert len(sharp.data) == 2 + 4  # learned retrainings that converged + every completion
    assert "6 of 8 retrained models kept" in sharp.note
    encoding = sharp.chart.to_dict()["encoding"]
    assert encoding["x"]["field"] == "as_n" and encoding["y"]["field"] == "sharpness_proxy_pm1"


def test_nothing_converged_gives_a_message_instead_of_an_empty_chart():
    runs = length_runs().assign(converged=False)
    (fig,) = results.figures("length_scaling", runs, pd.DataFrame())
    assert fig.data.empty and "0 of 8 finished runs kept" in fig.note
    assert chart_data(fig.chart) == [{"message": figures.NOTHING}]


def test_errors():
    with pytest.raises(ValueError, match="no figures for experiment 'toy'"):
        results.figures("toy", length_runs(), pd.DataFrame())
    with pytest.raises(ValueError, match="no finished runs"):
        results.figures("length_scaling", length_runs().assign(status="failed"), pd.DataFrame())


def test_summarise_skips_missing_values():
    frame = pd.DataFrame({"g": [1, 1, 1], "v": [1.0, 3.0, math.nan]})
    table = figures.summarise(frame, ["g"], {"v": "value", "absent": "nothing"})
    assert table.to_dict("records") == [{"g": 1, "metric": "value", "mean": 2.0, "stderr": 1.0, "low": 1.0,
                                         "high": 3.0, "count": 2}]


# ----------------------------------------------------------------------------- charts a class can read


def every_figure() -> list:
    """Every figure of every experiment on small fixed tables."""
    runs = length_runs()
    history = pd.DataFrame([{"run_id": r, "step": s, "loss": 0.1 / (s + 1), "sharpness_proxy_pm1": 0.1,
                             "param_norm": 3.0} for r in ("parity40", "parity41") for s in (0, 10)])
    scratch = pd.DataFrame([{"run_id": f"{a}{n}", "arch": a, "n": n, "status": "finished", "converged": True,
                             "sharpness_proxy_pm1": 0.1, "sharpness_limit_pm1": 0.01, "sharpness_pm1": 0.1,
                             "log_blowup_mean": 2.0, "param_norm": 10.0} for a in ("scratchpad", "encoder")
                            for n in (4, 8, 16)])
    general = pd.DataFrame([{"run_id": f"{size}", "n": 8, "train_size": size, "seed": 0, "status": "finished",
                             "converged": True, "as_learned": 2.0, "as_completion_mean": 4.0, "as_target": 4.0,
                             "as_completion_retrained": 3.9, "learned_converged": True, "completion_converged": True,
                             "learned_sharpness_proxy_pm1": 0.05, "completion_sharpness_proxy_pm1": 0.2,
                             "learned_sharpness_limit_pm1": 0.01, "completion_sharpness_limit_pm1": 0.02}
                            for size in (32, 64)])
    return (results.figures("length_scaling", runs, pd.DataFrame()) + results.figures("tradeoff", runs, pd.DataFrame())
            + results.figures("dynamics", runs[runs["task"] == "parity"], history)
            + results.figures("scratchpad", scratch, pd.DataFrame())
            + results.figures("generalization", general, pd.DataFrame()))


def luminance(colour: str) -> float:
    """WCAG relative luminance of '#rrggbb'."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_tasks_have_fixed_distinct_colours_with_parity_the_strongest():
    colours = list(figures.TASK_COLORS.values())
    assert list(figures.TASK_COLORS)[0] == "parity" and len(set(colours)) == len(colours)
    assert min(figures.TASK_COLORS, key=lambda t: luminance(figures.TASK_COLORS[t])) == "parity"
    assert all(1.05 / (luminance(c) + 0.05) >= 3 for c in colours + list(figures.COLORS))  # readable on white
    (fig,) = results.figures("length_scaling", length_runs(), pd.DataFrame())
    scale = fig.chart.to_dict()["spec"]["layer"][0]["encoding"]["color"]["scale"]
    assert scale == {"domain": ["parity", "first"],
                     "range": [figures.TASK_COLORS["parity"], figures.TASK_COLORS["first"]]}
    scatter, bound = results.figures("tradeoff", length_runs(), pd.DataFrame())
    for chart in (scatter.chart.to_dict()["spec"], bound.chart.to_dict()):
        assert chart["encoding"]["color"]["scale"]["domain"][0] == "parity"


def test_every_tooltip_prints_few_digits_and_the_mean():
    for fig in every_figure():
        spec = fig.chart.to_dict()
        tooltips = [t for found in walk(spec, "tooltip") for t in (found if isinstance(found, list) else [found])]
        assert tooltips, fig.key
        for tip in tooltips:
            if tip.get("type") == "quantitative" and tip["field"] not in ("count", "n", "step"):
                assert re.fullmatch(r"\.[234]~g|~g|d", tip.get("format", "")), (fig.key, tip)
        fields = {t["field"] for t in tooltips}
        if "mean" in set(walk(spec, "field")):
            assert "mean" in fields, fig.key
        marks = [m["type"] if isinstance(m, dict) else m for m in walk(spec, "mark")]
        encodings = [e for e in walk(spec, "encoding")]
        assert len(marks) == len(encodings) and all("tooltip" in e or "text" in e for e in encodings), fig.key


def test_every_figure_fits_the_apps_column_and_is_tall_enough():
    for fig in every_figure():
        spec = fig.chart.to_dict()
        if "facet" in spec:  # panels: COLUMNS wide, each at least 100 px tall, legends on top
            inner = spec["spec"]
            columns = spec.get("columns") or (1 if "column" not in spec["facet"] else 2)
            assert columns <= figures.COLUMNS and inner["height"] >= 100, fig.key
            assert columns * (inner["width"] + 70) <= figures.MAX_WIDTH, fig.key  # axes and spacing included
            assert spec["resolve"].get("axis", {}).get("x") == "independent" or "row" in spec["facet"], fig.key
        else:  # one chart: its width includes axes and legends
            assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}, fig.key
            assert spec["width"] <= figures.MAX_WIDTH and spec["height"] >= 100, fig.key
        assert all(legend.get("orient") == "top" for legend in walk(spec, "legend") if legend), fig.key


def test_panels_come_two_wide_with_one_panel_per_metric():
    (fig,) = results.figures("length_scaling", length_runs(), pd.DataFrame())
    spec = fig.chart.to_dict()
    assert spec["columns"] == 2 and len({row["metric"] for row in chart_data(fig.chart)}) == 6
    scratch = [fig for fig in every_figure() if fig.key == "scratchpad"][0]
    assert len(set(scratch.data["metric"])) == 5 and scratch.chart.to_dict()["resolve"]["axis"] == {"x": "independent"}
    x_axis = spec["spec"]["layer"][0]["encoding"]["x"]["axis"]
    assert x_axis["values"] == [4, 8] and x_axis["format"] == "d"  # never '1e+1'


def test_stored_figures_are_the_drawn_figures_drawn_once_per_content_of_the_tables(tmp_path, monkeypatch):
    from sensviz import sweeps

    folder = tmp_path / "quick" / "length_scaling"
    folder.mkdir(parents=True)
    length_runs().to_parquet(folder / "runs.parquet")
    (folder / "spec.json").write_text('{"experiment": "length_scaling"}')
    cache = tmp_path / "cache"
    (stored,) = results.stored_figures(folder, cache)
    (drawn,) = results.figures("length_scaling", *sweeps.read_results(folder)[:2])
    assert (stored["key"], stored["title"], stored["explanation"], stored["note"]) == (
        drawn.key, drawn.title, drawn.explanation, drawn.note)
    assert stored["spec"] == drawn.chart.to_dict()
    pd.testing.assert_frame_equal(stored["data"], drawn.data.reset_index(drop=True))
    (kept,) = cache.glob("figures-*.json")

    def not_again(*args):
        raise AssertionError("drawn again")

    monkeypatch.setattr(results, "figures", not_again)
    assert results.stored_figures(folder, cache)[0]["spec"] == stored["spec"]  # read back, not drawn
    monkeypatch.undo()
    length_runs().iloc[:-1].to_parquet(folder / "runs.parquet")  # another version of the tables
    (again,) = results.stored_figures(folder, cache)
    assert again["note"] != stored["note"] and [p.name for p in cache.glob("figures-*.json")] != [kept.name]
    assert len(list(cache.glob("figures-*.json"))) == 1  # the old version removed
    (folder / "spec.json").write_text("{}")
    with pytest.raises(ValueError, match="names no experiment"):
        results.stored_figures(folder, cache)
