"""Compare mode and charts a class can read, under Streamlit's AppTest: the four analysis pages opened
by a link with `compare=` show both models on one colour scale, the sidebar's "Compare with…", the
Sensitivity cube on [0, n], the attention colour range, the sidebar's checkpoints and numbers,
uploads that name the file (and refuse PyTorch pickles), and the paper's citation on About."""

import io
import json
import re
import zipfile

import pandas as pd
import pyarrow as pa
import pytest
from helpers.app import ROOT, ZOO, goto, notices, open_url, plain, selected, train_tiny, upload, wait_until
from helpers.core import walk

import sensviz as sv
from ui import model_refs, page, registry

PARITY, FIRST = "encoder-parity-n8", "encoder-first-n8"
PAIR = {"model": PARITY, "compare": FIRST}
ANALYSIS = ("attention", "sensitivity", "layernorm", "landscape")


def charts(at) -> list[tuple[dict, pd.DataFrame]]:
    """Every chart of the page: its Vega-Lite spec and all its data as one table."""
    found = []
    for element in at.get("vega_lite_chart"):
        spec = json.loads(element.proto.spec)
        frames = [pa.ipc.open_stream(d.data.data).read_pandas() for d in element.proto.datasets]
        found.append((spec, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()))
    return found


def colours(spec: dict) -> list[dict]:
    """The colour encodings of a chart (one per view)."""
    return [e["color"] for e in walk(spec, "encoding") if isinstance(e.get("color"), dict) and "field" in e["color"]]


def labels_in(data: pd.DataFrame) -> set:
    return set(data.get("model", pd.Series(dtype=str)).dropna()) | set(data.get("function", pd.Series(dtype=str)).dropna())


def compared(at) -> model_refs.ModelRef | None:
    return at.session_state.get(registry.COMPARE)


# ----------------------------------------------------------------------------- compare mode


@pytest.mark.parametrize("name", ANALYSIS)
def test_compare_mode_shows_both_models_on_one_colour_scale(name):
    cheap = {"directions": 16, "inputs": 64}  # the fewest directions and inputs: the colour scales are the same
    at = open_url(name, **PAIR, **({"curve": 1, "slice": 1, **cheap} if name == "landscape" else {}))
    assert not notices(at), notices(at)
    assert selected(at).key == PARITY and compared(at).key == FIRST
    assert at.query_params["compare"].startswith(f"{FIRST}~")  # the link keeps the comparison
    assert f"Compared with **{FIRST}** at n=8" in " ".join(plain(c.value) for c in at.sidebar.caption)
    drawn = charts(at)
    together = [(spec, data) for spec, data in drawn if {PARITY, FIRST} <= labels_in(data)]
    assert together, [labels_in(data) for _, data in drawn]  # at least one chart draws both models
    for spec, data in together:
        by_field = {}
        for colour in colours(spec):  # views of one chart colour one field by one scale
            by_field.setdefault(colour["field"], []).append(json.dumps(colour.get("scale"), sort_keys=True))
        assert all(len(set(scales)) == 1 for scales in by_field.values()), by_field
        for colour in colours(spec):
            domain = (colour.get("scale") or {}).get("domain")
            if colour["field"] in ("model", "function") and domain:
                assert {PARITY, FIRST} <= set(domain)  # a colour per model, in the legend
            elif colour.get("type") == "quantitative" and colour["field"] in data and domain:
                values = data[colour["field"]].dropna()  # fixed or fitted, the scale covers both models' values
                assert domain[0] <= values.min() + 1e-12 and values.max() <= domain[1] + 1e-12, (colour["field"], domain)


def test_compare_mode_on_each_page_is_the_same_chart_code_with_shared_domains():
    at = open_url("sensitivity", **PAIR)
    cube, data = charts(at)[0]
    assert [c["scale"]["domain"] for c in colours(cube)] == [[0, 8], [0, 8]]  # PARITY and FIRST on one [0, n]
    assert cube["resolve"]["scale"]["color"] == "shared" and cube["params"][0]["views"] == ["cube_0", "cube_1"]
    assert [view["title"] for view in cube["hconcat"]] == [PARITY, FIRST]
    attention = charts(open_url("attention", **PAIR))[0]
    scale = colours(attention[0])[0]["scale"]
    weights = attention[1]
    assert scale["domain"] == [weights["weight"].min(), weights["weight"].max()]
    assert set(weights["model"]) == {PARITY, FIRST}
    ln, factors = charts(open_url("layernorm", **PAIR))[0]
    assert set(factors["model"]) == {PARITY, FIRST}
    assert colours(ln)[0]["scale"]["domain"] == [factors["ln_factor"].min(), factors["ln_factor"].max()]


def test_the_sensitivity_cube_shows_s_on_0_to_n_and_marks_the_target():
    for name, value in ((PARITY, 8), (FIRST, 1)):
        at = open_url("sensitivity", model=name)
        cube, data = charts(at)[0]
        cells = colours(cube)[0]
        assert cells["field"] == "s_model" and cells["scale"]["domain"] == [0, 8]  # never fitted to one value
        assert set(data.loc[data["bits"].notna() & data["s_model"].notna(), "s_model"]) == {value}
        dots = [layer for layer in walk(cube, "layer") for layer in layer if layer["mark"]["type"] == "circle"]
        assert dots  # the target's ones are marked
        axes = {cube["hconcat"][0]["layer"][0]["encoding"][a]["field"] for a in ("x", "y")}
        assert axes == {"col_bits", "row_bits"}  # rows and columns labelled by their bit patterns


def test_compare_with_a_model_that_cannot_read_n_is_analysed_at_its_own_length():
    params = {"model": PARITY, "compare": "encoder-first-n4"}
    for name in ANALYSIS:
        at = open_url(name, **params)
        warnings = [plain(w.value) for w in at.sidebar.warning]
        assert any("encoder-first-n4 reads lengths 1..4: it is analysed at n=4" in w for w in warnings), warnings
        assert at.session_state[registry.CURRENT].compare_n == 4
    sensitivity = open_url("sensitivity", **params)
    (cube, data), *_ = charts(sensitivity)
    assert colours(cube)[0]["scale"]["domain"] == [0, 8]  # one scale for both: the larger n


def test_the_sidebar_offers_compare_with_any_zoo_or_kept_model():
    at = open_url("sensitivity", model=PARITY)
    choice = at.sidebar.selectbox(key=registry.COMPARE_WITH)
    assert choice.label == "Compare with…" and choice.value == ""
    shown = choice.options  # as people read them
    assert shown[0] == "nothing: one model" and "first n=8 · encoder · 100%" in shown
    assert "parity n=8 · encoder · 100%" not in shown and "parity n=8 · scratchpad · 100%" in shown
    choice.set_value(FIRST).run()
    assert not at.exception and compared(at).key == FIRST and at.query_params["compare"].startswith(FIRST)
    assert len([s for s, _ in charts(at)[:1] for v in s["hconcat"]]) == 2  # the cube of each
    at.sidebar.selectbox(key=registry.COMPARE_WITH).set_value("").run()
    assert compared(at) is None and "compare" not in at.query_params
    model = sv.build_model("formal", d_model=8, n_heads=2, max_len=8, seed=1)
    at = upload(at, "mine.safetensors", sv.checkpoint_bytes(model, task="first", n=8))
    mine = selected(at)
    shown = at.sidebar.selectbox(key=registry.COMPARE_WITH).options
    assert "mine.safetensors (upload)" not in shown and "parity n=8 · encoder · 100%" in shown  # not with itself
    at.sidebar.selectbox(key=registry.COMPARE_WITH).set_value(PARITY).run()  # a kept model beside a zoo model
    assert not at.exception and compared(at).key == PARITY
    again = open_url("sensitivity", model=PARITY, compare=f"upload:{mine.key}")  # and the other way round
    assert compared(again).key == mine.key
    assert "mine.safetensors (upload)" in again.sidebar.selectbox(key=registry.COMPARE_WITH).options
    cube = charts(again)[0][0]
    assert [view["title"] for view in cube["hconcat"]] == [PARITY, "mine.safetensors (upload)"]


def test_compare_naming_the_model_itself_is_a_notice():
    at = open_url("attention", model=PARITY, compare=PARITY)
    assert any("names the model itself" in n for n in notices(at)) and compared(at) is None


# ----------------------------------------------------------------------------- charts a class can read


def test_attention_colours_are_fitted_by_default_with_the_fixed_range_as_a_setting():
    at = open_url("attention", model=PARITY, x="10110010")
    spec, data = charts(at)[0]
    assert colours(spec)[0]["scale"]["domain"] == [data["weight"].min(), data["weight"].max()]
    assert "10110010" in json.dumps(spec)  # the input's bits label the positions
    fixed = open_url("attention", model=PARITY, range="fixed")
    assert colours(charts(fixed)[0][0])[0]["scale"]["domain"] == [0, 1] and fixed.query_params["range"] == "fixed"


def test_the_sidebar_lists_checkpoints_by_task_then_numeric_n():
    at = open_url("home")
    labels = at.sidebar.selectbox(key=registry.ZOO_FILE).options  # as people read them
    parity = [int(re.match(r"parity n=(\d+)", label)[1]) for label in labels if label.endswith("· encoder · 100%")
              and label.startswith("parity")]
    assert parity == [4, 6, 8, 10, 12, 16]  # never 10, 12, 16 before 4
    tasks = [label.split(" n=")[0] for label in labels]
    assert tasks == sorted(tasks)  # that they are not cut short is checked in the browser (test_e2e)


def test_the_training_curves_offer_a_log_axis_for_the_loss():
    at = train_tiny(open_url("home"))
    wait_until(at, lambda at: selected(at) is not None and selected(at).kind == "trained")
    goto(at, "train")
    curves = charts(at)[0][0]
    assert [view["title"] for view in curves["concat"]][0] == "loss"
    at.toggle(key="sv_w_train_logloss").set_value(True).run()
    curves = charts(at)[0][0]
    loss = next(view for view in curves["concat"] if view["title"] == "loss (log axis)")
    assert loss["encoding"]["y"]["scale"] == {"type": "log"} and at.query_params["logloss"] == "1"
    assert all(view["encoding"]["y"]["scale"].get("type") != "log" for view in curves["concat"] if view is not loss)


@pytest.mark.parametrize("value, text", [(10120.4, "1.012e4"), (24.2216, "24.22"), (0.5, "0.5"), (3.2e-5, "3.2e-5"),
                                         (0.0, "0"), (123456.0, "1.235e5"), (None, "—")])
def test_large_and_small_numbers_in_scientific_form(value, text):
    assert page.figure(value, 2 if value == 3.2e-5 else 4) == text


def test_the_scratchpads_mean_blowup_is_shown_in_scientific_form():
    at = open_url("home", model="scratchpad-parity-n8")
    shown = next(m.value for m in at.sidebar.metric if m.label == "mean Blowup")
    ck = sv.load_checkpoint(ROOT / "checkpoints" / "scratchpad-parity-n8.safetensors")
    mean = sv.blowup.blowup_summary(ck.model, 8).mean
    assert shown == page.figure(mean)
    assert mean < 1e4 or re.fullmatch(r"\d\.\d+e\d+", shown), shown  # 1.012e4, never "10120" nor "1.01…"


def test_a_pytorch_file_is_refused_unopened_with_the_way_to_convert_it(monkeypatch):
    at = open_url("sensitivity", model=ZOO)
    calls = []
    monkeypatch.setattr(sv, "load_checkpoint", lambda *a, **k: calls.append(1))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:  # what torch.save writes
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    for name, data in (("authors_model.pt", b"anything"), ("weights.pth", zipped.getvalue()),
                       ("renamed.safetensors", zipped.getvalue())):
        at = upload(at, name, data)
        errors = [plain(e.value) for e in at.sidebar.error]
        assert any(name in e and "sensviz convert" in e and "--task" in e and "never opens" in e for e in errors), errors
        said = "is named like a PyTorch file, but its first bytes" if data == b"anything" else "is a PyTorch file (a pickle)"
        assert any(said in e for e in errors), errors  # a text file named .pt is not called a pickle
        main = [plain(e.value) for e in at.main.error]  # also above the page's content, not only below the sidebar's fold
        assert any(e.startswith("Your upload was not used.") and name in e for e in main), main
        assert any(f"Still showing **{ZOO}**" in plain(c.value) for c in at.sidebar.caption)
        assert selected(at).key == ZOO
    assert not calls  # no loader, no unpickling: refused by its name or first bytes
    at.sidebar.segmented_control(key=registry.SOURCE).set_value("Pretrained").run()
    assert not any("Your upload was not used" in e.value for e in at.main.error)  # gone once the upload is put aside


def test_an_authors_file_without_heads_names_the_apps_field(tmp_path):
    from helpers.core import authors_file

    _, path = authors_file(tmp_path)
    at = upload(open_url("home", model=ZOO), "authors.safetensors", path.read_bytes())
    (error,) = [plain(e.value) for e in at.sidebar.error]
    assert "authors.safetensors" in error and "Attention heads" in error and "--n-heads" not in error
    assert any(f"Still showing **{ZOO}**" in plain(c.value) for c in at.sidebar.caption)
    at.sidebar.number_input(key=registry.UPLOAD_HEADS).set_value(2).run()  # the field the message names
    at = upload(at, "authors.safetensors", path.read_bytes())  # the refused upload was freed: upload it again
    assert not at.sidebar.error and selected(at).name == "authors.safetensors"
    captions = " ".join(plain(c.value) for c in at.sidebar.caption)
    assert "Trained input length n" in captions and "(--n)" not in captions  # the loader's note, in the app's words


def test_about_links_the_paper_and_gives_its_citation():
    at = open_url("about")
    text = " ".join(m.value for m in at.markdown)
    assert "https://aclanthology.org/2024.acl-long.800" in text and "Why are Sensitive Functions Hard for Transformers?" in text
    assert "Michael Hahn and Mark Rofin. 2024." in text and "pages 14973–15008" in text
    assert "doi = \"10.18653/v1/2024.acl-long.800\"" in at.code[0].value
