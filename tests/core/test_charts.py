"""The explorer's charts (`sensviz.charts`) read by their Vega-Lite specs and drawn by vl-convert: one
model and two models on one colour scale, fixed and fitted colour domains, bit patterns on the
axes, readable legends and titles, and every chart inside the app's main column at a 1024-px
window and at least 100 px tall."""

import re
from pathlib import Path

import pandas as pd
import pytest
import torch
import vl_convert
from helpers.core import walk

import sensviz as sv
from sensviz import analysis, charts, tables
from sensviz.figures import TASK_COLORS

ROOT = Path(__file__).resolve().parents[2]
COLUMN = 560  # the main column beside the sidebar at a 1024-px window
MODELS = ("encoder-parity-n8", "encoder-first-n8")
X = "10110010"
TRAINING = [{"step": step, "loss": 0.5 / (1 + step), "accuracy": min(1.0, 0.5 + step / 400), "sharpness": 0.01 * step,
             "param_norm": 10 + step / 100, "avg_sensitivity": step / 50} for step in range(0, 401, 50)]
"""Measurements of a run, when the zoo's checkpoint carries none."""


@pytest.fixture(scope="module")
def found() -> dict:
    """The tables of the two models the charts draw, by model."""
    out = {}
    for name in MODELS:
        ck = sv.load_checkpoint(ROOT / "checkpoints" / f"{name}.safetensors")
        report = analysis.sensitivity_report(ck.model, ck.n, ck.task, ck.encoding)
        trace = ck.model.trace(torch.tensor([[int(b) for b in X]]))
        blowup = sv.blowup.blowup_summary(ck.model, ck.n, keep_factors=True)
        out[name] = {
            "vertices": tables.vertex_table(report, ck.encoding),
            "histogram": tables.sensitivity_histogram(report),
            "degrees": tables.degree_table(report),
            "by_weight": tables.by_weight_table(report),
            "attention": tables.attention_table(trace.attention[0], trace.attention_names),
            "ln": tables.ln_factor_table(trace.ln_factor[0], trace.ln_names),
            "ln_histogram": tables.ln_factor_histogram(blowup.factors, tuple(r["name"] for r in blowup.per_ln)),
            "blowup_histogram": tables.blowup_histogram(blowup.values),
            "per_ln": tables.per_ln_table(blowup),
            "by_s": tables.blowup_by_sensitivity(blowup.values, report.model.sensitivity, name),
            "records": ck.metadata.get("extra", {}).get("measurements", []),
        }
    return out


def both(found: dict, name: str, models_only: bool = False) -> pd.DataFrame:
    frames = [found[m][name].assign(model=m) for m in MODELS]
    table = pd.concat(frames, ignore_index=True)
    return table[table["function"] == "model"] if models_only else table


def size(chart) -> tuple[float, float]:
    """The drawn chart's width and height in pixels (vl-convert: the spec's own sizes, as Streamlit
    draws compound charts; single charts Streamlit fits to the column)."""
    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    width, height = re.search(r'width="([\d.]+)" height="([\d.]+)"', svg).groups()
    return float(width), float(height)


def texts(chart) -> list[str]:
    """Every text the drawn chart shows (axis labels, titles, legends)."""
    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    return [re.sub(r"<[^>]+>", "", t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]


def colour_scales(spec: dict) -> list[dict]:
    return [e["color"]["scale"] for e in walk(spec, "encoding") if "scale" in e.get("color", {})]


# ----------------------------------------------------------------------------- the cube


def test_the_cube_colours_s_on_the_fixed_domain_0_to_n_so_parity_and_first_look_different(found):
    grids = {m: found[m]["vertices"] for m in MODELS}
    spec = charts.cube_grids(grids, "s_model", 8).to_dict()
    scales = colour_scales(spec)
    assert len(scales) == 2 and all(s["domain"] == [0, 8] for s in scales)
    assert spec["resolve"]["scale"]["color"] == "shared"  # one legend: equal colours, equal s
    # what the two grids show is 8 everywhere and 1 everywhere: at the two ends of the one scale
    assert set(found[MODELS[0]]["vertices"]["s_model"]) == {8} and set(found[MODELS[1]]["vertices"]["s_model"]) == {1}
    for model in MODELS:  # one model alone: the same fixed domain, never fitted to a single value
        assert {tuple(s["domain"]) for s in colour_scales(charts.cube_grids({model: grids[model]}).to_dict())} == {(0, 8)}


def test_the_cube_caption_names_the_colours_its_legend_draws(found):
    grids = {m: found[m]["vertices"] for m in MODELS}

    def legend_ends(value) -> tuple[tuple[int, ...], tuple[int, ...]]:  # the gradient's colours at min and max
        svg = vl_convert.vegalite_to_svg(charts.cube_grids(grids, value).to_dict())
        stops = re.findall(r'<stop offset="[\d.]+" stop-color="rgb\(([\d, ]+)\)"', svg)
        return tuple(map(int, stops[0].split(","))), tuple(map(int, stops[-1].split(",")))

    low, high = legend_ends("s_difference")  # above 0: the model more sensitive than the target
    words = charts.cube_scale_words("s_difference", 8)
    above = "red" if high[0] > high[2] else "blue"
    below = "red" if low[0] > low[2] else "blue"
    assert above != below and f"{above}: the model is more sensitive" in words and f"{below}: less" in words
    low, high = legend_ends("output_pm1")
    assert sum(low) < sum(high) and "dark: −1, light: +1" in charts.cube_scale_words("output_pm1", 8)
    assert "0..8" in charts.cube_scale_words("s_model", 8)


def test_the_cube_diverging_colourings_are_symmetric_around_zero(found):
    grids = {m: found[m]["vertices"] for m in MODELS}
    difference = colour_scales(charts.cube_grids(grids, "s_difference").to_dict())[0]
    assert difference["domain"] == [-8, 8] and difference["scheme"] == "redblue"
    output = colour_scales(charts.cube_grids(grids, "output_pm1").to_dict())[0]
    reach = max(1.0, max(float(g["output_pm1"].abs().max()) for g in grids.values()))
    assert output["domain"] == [-reach, reach]


def test_the_cube_labels_rows_and_columns_with_bit_patterns_in_gray_order(found):
    spec = charts.cube_grids({MODELS[0]: found[MODELS[0]]["vertices"]}).to_dict()
    cells = spec["hconcat"][0]["layer"][0]["encoding"]
    for axis, width in (("x", 4), ("y", 4)):
        order = cells[axis]["sort"]
        assert len(order) == 16 and all(len(bits) == width and set(bits) <= {"0", "1"} for bits in order)
        assert all(sum(a != b for a, b in zip(u, v)) == 1 for u, v in zip(order, order[1:]))  # neighbours adjacent
    shown = texts(charts.cube_grids({MODELS[0]: found[MODELS[0]]["vertices"]}))
    assert {"0000", "0001", "0011", "1000"} <= set(shown)


def test_the_cube_marks_the_targets_ones_and_picks_a_vertex_in_either_model(found):
    grids = {m: found[m]["vertices"] for m in MODELS}
    spec = charts.cube_grids(grids).to_dict()
    dots = [layer for view in spec["hconcat"] for layer in view["layer"] if layer["mark"]["type"] == "circle"]
    assert len(dots) == 2
    for view, model in zip(spec["hconcat"], MODELS):
        name = view["layer"][1]["data"]["name"]
        assert len(spec["datasets"][name]) == int((grids[model]["target"] == 1).sum())
    (pick,) = spec["params"]
    assert pick["name"] == charts.PICK and pick["views"] == ["cube_0", "cube_1"] and pick["select"]["fields"] == ["vertex"]


def test_cubes_too_small_side_by_side_go_one_under_the_other():
    n = 12
    table = tables.vertex_table(sv.analysis.sensitivity_report(
        sv.build_model("encoder", d_model=8, n_layers=1, n_heads=1, max_len=n, seed=0), n, sv.tasks.get_task("parity")),
        sv.tasks.get_encoding("zero_one"))
    chart = charts.cube_grids({"a": table, "b": table}, "s_model", n)
    assert "vconcat" in chart.to_dict() and size(chart)[0] <= COLUMN


# ----------------------------------------------------------------------------- attention, LayerNorm


def test_attention_colours_are_fitted_to_the_weights_or_fixed_and_the_axes_show_the_bits(found):
    table = both(found, "attention")
    fitted = colour_scales(charts.attention_heatmaps(table, bits=X).to_dict())[0]
    assert fitted["domain"] == [table["weight"].min(), table["weight"].max()]  # both models, one scale
    assert colour_scales(charts.attention_heatmaps(table, fixed=True).to_dict())[0]["domain"] == [0, 1]
    one = found[MODELS[0]]["attention"]
    shown = texts(charts.attention_heatmaps(one, bits=X))
    assert {f"{i}: {b}" for i, b in enumerate(X)} <= set(shown)  # position: bit, on the axes
    panels = charts.attention_heatmaps(table).to_dict()
    assert panels["spec"]["width"] >= 200  # larger cells: 8 positions in at least 200 px
    assert len(set(table["model"] + table["block"] + table["head"].astype(str))) == 8  # 2 models x 2 layers x 2 heads


def test_an_attention_change_diverges_symmetrically(found):
    weights = found[MODELS[0]]["attention"]
    change = weights.assign(weight_flipped=weights["weight"][::-1].to_numpy())
    change = change.assign(change=change["weight_flipped"] - change["weight"])
    scale = colour_scales(charts.attention_heatmaps(change, value="change").to_dict())[0]
    reach = change["change"].abs().max()
    assert scale["domain"] == [-reach, reach]


def test_the_layernorm_log_legend_has_readable_ticks(found):
    for table in (found[MODELS[0]]["ln"], both(found, "ln")):
        spec = charts.ln_heatmap(table).to_dict()
        color = next(e["color"] for e in walk(spec, "encoding") if "color" in e)
        values, (low, high) = color["legend"]["values"], color["scale"]["domain"]
        assert color["scale"]["type"] == "log" and len(values) >= 3
        assert all(low * 0.95 <= v <= high * 1.05 and len(f"{v:g}".replace(".", "").lstrip("0")) <= 2 for v in values)
        legend = [t for t in texts(charts.ln_heatmap(table)) if re.fullmatch(r"[\d.]+", t)]
        assert legend and all(len(t) <= 4 for t in legend), legend  # never "1.51440811157"


def test_blowup_against_sensitivity_does_not_clip_its_points(found):
    table = pd.concat([found[m]["by_s"] for m in MODELS], ignore_index=True)
    spec = charts.blowup_by_sensitivity(table).to_dict()
    x = next(e["x"] for e in walk(spec, "encoding") if "x" in e)
    y = next(e["y"] for e in walk(spec, "encoding") if "y" in e and e["y"].get("scale"))
    assert x["scale"]["domain"][0] < table["s"].min() and x["scale"]["domain"][1] > table["s"].max()
    assert y["scale"]["domain"][0] < table["q10"].min() and y["scale"]["domain"][1] > table["q90"].max()


# ----------------------------------------------------------------------------- the landscape, training


def test_slices_say_which_panel_is_loss_and_which_accuracy_and_on_which_task():
    line = pd.DataFrame({"alpha": [-1.0, 0.0, 1.0], "loss": [0.3, 0.01, 0.2], "accuracy": [0.6, 1.0, 0.7]})
    spec = charts.slice_line(line, "1-D slice", task="PARITY inputs, n=8").to_dict()
    titles = [view["title"] for view in spec["vconcat"]]
    assert titles == ["loss on PARITY inputs, n=8", "accuracy on PARITY inputs, n=8"]
    assert [view["encoding"]["y"]["title"] for view in spec["vconcat"]] == ["loss", "accuracy"]
    models = pd.concat([line.assign(model="a"), line.assign(model="b")])
    assert next(walk(charts.slice_line(models).to_dict(), "color"))["field"] == "model"


def test_training_curves_offer_a_log_axis_for_the_loss_only(found):
    table = tables.training_table(found[MODELS[0]]["records"] or TRAINING)
    panels = {view["title"]: view["encoding"]["y"]["scale"] for view in
              charts.training_curves(table, log_loss=True).to_dict()["concat"]}
    assert panels.pop("loss (log axis)") == {"type": "log"}
    assert panels and all(scale.get("type") != "log" for scale in panels.values())
    assert all(view["title"] != "loss (log axis)" for view in charts.training_curves(table).to_dict()["concat"])


def test_radius_curves_of_one_model_from_the_caches_table_and_of_several():
    curve = pd.DataFrame({"rho": [0.01, 0.1, 1.0], "ratio": [2.0, 2.1, 3.0], "ratio_stderr": [0.1, 0.2, 3.5],
                          "limit": [2.0] * 3})
    one = charts.radius_curves(curve, 0.3).to_dict()
    low = next(d for d in one["datasets"].values() if "low" in d[0])
    assert min(row["low"] for row in low) > 0  # an error bar through 0 stays on the log axis
    two = charts.radius_curves(pd.concat([curve.assign(model="a"), curve.assign(model="b")]), [0.3, 0.4]).to_dict()
    assert any(len(d) == 2 and "rho" in d[0] and "model" not in d[0] for d in two["datasets"].values())


# ----------------------------------------------------------------------------- sizes


def every_chart(found) -> dict:
    line = pd.DataFrame({"alpha": [-1.0, 0.0, 1.0], "loss": [0.3, 0.01, 0.2], "accuracy": [0.6, 1.0, 0.7]})
    plane = pd.DataFrame([{"alpha": a / 2, "beta": b / 2, "loss": a * b + 1.0, "accuracy": 1.0}
                          for a in range(-2, 3) for b in range(-2, 3)])
    segments = sv.slices.contour_segments(plane, "loss", 4)
    at_radius = pd.DataFrame([{"quantity": q, "value": 1.0, "low": 0.9, "high": 1.1, "label": "1 ± 0.1"}
                              for q in ("L_ρ measured (64 directions)", "ρ² × exact small-ρ limit")])
    one = found[MODELS[0]]
    grids = {m: found[m]["vertices"] for m in MODELS}
    return {
        "cube": charts.cube_grids({MODELS[0]: grids[MODELS[0]]}), "cubes": charts.cube_grids(grids),
        "histogram": charts.histogram(one["histogram"]), "histograms": charts.histogram(both(found, "histogram", True)),
        "degrees": charts.degree_profiles(one["degrees"]), "degrees2": charts.degree_profiles(both(found, "degrees", True)),
        "by_weight": charts.lines(both(found, "by_weight", True), "weight", "mean_sensitivity", "w", "s"),
        "attention": charts.attention_heatmaps(one["attention"], bits=X),
        "attention2": charts.attention_heatmaps(both(found, "attention"), bits=X),
        "ln": charts.ln_heatmap(one["ln"]), "ln2": charts.ln_heatmap(both(found, "ln")),
        "ln_histogram": charts.log_histogram(one["ln_histogram"], "log10 N", color="ln_name"),
        "ln_histograms": charts.log_histogram(both(found, "ln_histogram"), "log10 N", color="ln_name"),
        "blowup_histograms": charts.model_log_histograms(both(found, "blowup_histogram")),
        "per_ln": charts.per_ln_bars(one["per_ln"]), "per_ln2": charts.per_ln_bars(both(found, "per_ln")),
        "slice": charts.slice_line(line), "slices": charts.slice_line(pd.concat([line.assign(model="a"),
                                                                                line.assign(model="b")])),
        "contour": charts.contour_chart(plane, segments),
        "contours": charts.contour_chart(pd.concat([plane.assign(model="a"), plane.assign(model="b")]),
                                         pd.concat([segments.assign(model="a"), segments.assign(model="b")])),
        "at_radius": charts.sharpness_at_radius(at_radius),
        "at_radius2": charts.sharpness_at_radius(pd.concat([at_radius.assign(model="a"), at_radius.assign(model="b")])),
        "training": charts.training_curves(tables.training_table(one["records"] or TRAINING), log_loss=True),
    }


def test_every_chart_fits_the_main_column_and_is_tall_enough(found):
    for name, chart in every_chart(found).items():
        spec = chart.to_dict()
        width, height = size(chart)
        assert width <= COLUMN and height >= charts.MIN_HEIGHT, (name, width, height)
        if not any(k in spec for k in ("hconcat", "vconcat", "concat", "facet")):
            # one view: its width includes axes and legends, its height is the plot's own
            assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}, name
            assert spec["width"] == charts.WIDTH and spec["height"] >= charts.MIN_HEIGHT, name


def test_models_take_their_tasks_colours_when_their_labels_name_different_tasks():
    assert charts.model_colour(["encoder-parity-n8", "encoder-first-n8"]).to_dict()["scale"]["range"] == [
        TASK_COLORS["parity"], TASK_COLORS["first"]]
    assert charts.model_colour(["PARITY", "FIRST"]).to_dict()["scale"]["range"] == [TASK_COLORS["parity"],
                                                                                   TASK_COLORS["first"]]
    same_task = charts.model_colour(["encoder-parity-n8", "encoder-parity-n16"]).to_dict()["scale"]["range"]
    assert len(set(same_task)) == 2  # two PARITY models: told apart by order
