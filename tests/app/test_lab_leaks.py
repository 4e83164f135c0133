"""No path to the answer before the prediction. For each chapter the answer-bearing facts of `Built.claims`
and `Built.numbers` (`SECRETS`: each number in every format the page prints numbers in, and the claims'
words) must appear nowhere a student can see before predicting: the page's text and every element's
labels and help (glossary lines, formulas), chart titles, the Vega-Lite specs (titles, tooltip fields)
and their data (what "Show data" lists), the sidebar's model summary, downloads. What may appear is
stated per chapter (`settings`: the chapter's settings, the prediction's options) and never listed by hand.
The same check reads the student handout's front sections (the paper a student holds before the back section).
A chapter's charts may not carry the asked-for quantity at all (`HIDDEN`: its columns or metrics)."""

import html
import io
import json
import math
import re

import pandas as pd
import pyarrow as pa
import pytest
from helpers.app import goto, open_url

from sensviz import lab
from sensviz.mathml import mathml
from ui import model_refs

SOURCES = lab.Sources.shipped()

SECRETS = {  # per chapter: the numbers and claims that carry the answer
    1: (("as_parity", "as_first"), ("parity_where", "first_where")),
    2: (("sharp_ratio",), ("sharpness",)),
    3: (("mean_N_parity", "mean_N_first", "max_N_parity", "max_N_first", "blowup_parity", "blowup_first",
         "norm_parity", "norm_first"), ("factors", "blowup", "norm")),
    4: (("sharp_parity", "sharp_first", "stderr_parity", "stderr_first", "ratio_parity", "ratio_first", "sharp_ratio",
         "limit_parity", "limit_first", "limit_ratio"), ("sharper", "limit")),
    5: (("slope", "slope_low", "slope_high"), ("slope", "trend")),
    6: (("as_learned", "more_sensitive"), ("below",)),
    7: (("as_init", "q05", "q95", "ratio", "ratio_low", "ratio_high", "low_share", "top_init"), ("init",)),
}
WORDS = {  # per chapter: the answer in symbols or words that no claim holds (a formula or a glossary line stating it)
    1: ("n (PARITY)", "PARITY) = n", "(PARITY, x) = n", "every bit matters"),
    3: (r"\mathbb{E}[\mathrm{Blowup}^2] \ge",), 4: (r"\liminf_{n\to\infty} L_{\rho,n}(T) \ge",),
    6: (r"\ll", "≪", "low-sensitivity"),
}
HIDDEN = {  # per chapter: data columns, and values of a `metric`, `function` or `model` column, no chart may carry before
    1: {"s_model", "s_target", "s_difference"},
    2: {lab.SHARPNESS},
    3: {"mean_N", "max_N", "blowup", "log10_start"},
    4: {"value", "ratio", "limit", "loss"},
    5: {"mean", "slope"},
    6: {lab.LEARNED},
    7: {"avg_sensitivity", lab.INITS},
}
EARLIER = {  # per chapter: how a later chapter's chart would carry its answer (a function, model or metric it draws)
    1: {"trained PARITY model"},  # chapter 7's strip: the trained PARITY model at as_n = n, its weight at degree n
}
TELLS = {  # per chapter: the words that name what its answer turns on, which its title may not hold
    3: ("blowup",),  # the PARITY model's LayerNorms blow small differences up
}
FORMATS = (".2g", ".3g", ".4g", ".2f", ".3f")  # the page's (page.figure: .4g; the sidebar's as_n: .3f)
SHARES = {"more_sensitive", "all_parity", "one_first", "low_share"}  # printed as percentages


def settings(ch: lab.Chapter, built: lab.Built) -> set[str]:
    """The rule for allowed values: the chapter's settings as the page writes them (its n, 2^n, its control's
    options, the radius it asks at) and the integers up to n (bits, flip counts, axes): a number that equals one
    of them may appear in that form, never in another (8 may, 8.000 may not)."""
    n = int(built.numbers.get("n", 0))
    found = {str(k) for k in range(n + 1)} | {str(2**n)} | {ch.control.fmt(o) for o in ch.control.options}
    found |= {str(o) for o in ch.control.options}
    if "rho" in built.numbers:
        found |= {format(built.numbers["rho"], f) for f in FORMATS}
    return found


def forms(key: str, value: float) -> set[str]:
    """Every way the page prints a number, with at least two significant digits after the point (a form with
    fewer, 0.02 for 0.0214, names only an order of magnitude; a non-integer printed without its point, 14 for
    13.8, collides with lengths and counts); an integer as itself."""
    if key in SHARES:
        return {f"{value:.0%}", f"{value:.1%}"}
    if value == round(value):
        return {str(int(value)), *(format(value, f) for f in FORMATS)}
    printed = {format(value, f) for f in FORMATS}
    return {p for p in printed if "." in p and len(p.lstrip("-0.").replace(".", "")) >= 2}


def secret_strings(ch: lab.Chapter, built: lab.Built, own: bool = True) -> dict[str, str]:
    """{printed form: what it is} of the chapter's answer-bearing numbers and words, less what the rule allows.
    In another chapter (`own` False) its claims' words are not secrets: 'at every input' states chapter 1's answer
    in chapter 1's sentence about PARITY, and is plain English in chapter 7's definition of a Boolean function."""
    keys, claims = SECRETS[ch.number] if own else (SECRETS[ch.number][0], ())
    allowed = settings(ch, built)
    options = " ".join(ch.predict.options)
    found = {}
    for key in keys:
        value = float(built.numbers[key])
        found |= {s: key for s in forms(key, value) if s not in allowed and math.isfinite(value)}
    for key in claims:
        words = built.claims[key]
        if words not in options:  # the prediction's own options are on the page by design
            found[words] = key
    return found | {w: "the answer in words" for w in WORDS.get(ch.number, ())}


def frames(proto) -> list[pd.DataFrame]:
    """The data of a Vega-Lite chart as Streamlit sends it (Arrow), each data set a frame."""
    blobs = [d.data.data for d in proto.datasets] + [proto.data.data]
    return [pa.ipc.open_stream(io.BytesIO(b)).read_all().to_pandas() for b in blobs if b]


def elements(node):
    """Every element of an AppTest tree (main and sidebar)."""
    proto = getattr(node, "proto", None)
    if proto is not None:
        yield node
    for child in getattr(node, "children", {}).values():
        yield from elements(child)


CHOOSERS = ("sv_w_zoo_file", "sv_w_compare_with")
"""The rule for the sidebar's model choosers: every checkpoint with its training accuracy, the same list on
every page and in every chapter (from the zoo's manifest), so their options are not searched."""


def seen(at) -> tuple[str, list[pd.DataFrame], list[dict]]:
    """What a student can see: every element's text (labels, help, values; a chart's spec), each chart's data, each spec."""
    texts, data, specs = [], [], []
    for el in elements(at._tree):
        proto = el.proto
        if el.type == "vega_lite_chart" or hasattr(proto, "spec") and hasattr(proto, "datasets"):
            specs.append(json.loads(proto.spec))
            texts.append(proto.spec)
            data += frames(proto)
        elif any(getattr(proto, "id", "").endswith(key) for key in CHOOSERS):
            texts.append(proto.label)
        elif el.type == "download_button":
            texts.append(f"download {proto.label}")
        else:
            texts += [str(proto), getattr(proto, "body", ""), getattr(proto, "help", "")]  # the raw text too
    return re.sub(r'style=\\?"[^"]*"', "", "\n".join(texts)), data, specs  # an element's CSS is not shown


def leaks(text: str, secrets: dict[str, str]) -> list[str]:
    """The secrets the text holds, each as a whole number or phrase."""
    return [f"{s!r} ({what})" for s, what in secrets.items()
            if re.search(rf"(?<![\w.]){re.escape(s)}(?![\d%]|\.\d)", text, flags=re.IGNORECASE)
            or not s[:1].isalnum() and s in text]


def carried(data: list[pd.DataFrame], hidden: set[str], built: lab.Built, keys) -> list[str]:
    """The hidden columns, rows or non-integer secret values that the charts' data carries."""
    found = []
    values = [float(built.numbers[k]) for k in keys if float(built.numbers[k]) != round(float(built.numbers[k]))]
    for frame in data:
        found += [f"column {c}" for c in frame.columns if c in hidden]
        for column in ("metric", "function", "model"):
            if column in frame.columns:
                found += [f"{column} {v}" for v in set(frame[column]) & hidden]
        numeric = frame.select_dtypes("number").to_numpy().ravel()
        found += [f"value {v}" for v in values if any(abs(x - v) <= 1e-9 * max(1.0, abs(v)) for x in numeric)]
    return found


def before_the_prediction(number: int):
    """Chapter `number` as a new student opens it with its models selected (the sidebar's summary shown: from a
    link, as the chapter's "Load" button comes only with the answer), no prediction."""
    refs = [model_refs.zoo_ref(name).param for name in lab.chapter(number).models]
    at = open_url("lab", chapter=str(number), model=refs[0], **({"compare": refs[1]} if len(refs) > 1 else {}))
    assert not at.exception and at.query_params.get("model"), "the chapter's models are loaded in the sidebar"
    assert "predict" not in at.query_params
    return at


@pytest.mark.parametrize("number", range(1, len(lab.CHAPTERS) + 1))
def test_nothing_shows_the_answer_before_the_prediction(number):
    ch = lab.chapter(number)
    built = cache_built(number)
    at = before_the_prediction(number)
    text, data, _ = seen(at)
    secrets = secret_strings(ch, built)
    assert secrets, "every chapter has answer-bearing facts"
    assert leaks(text, secrets) == [], f"chapter {number}: the page shows the answer before the prediction"
    assert carried(data, hidden_before(number), built, SECRETS[number][0]) == [], f"chapter {number}: a chart's data"
    assert "Download the data" not in text
    for choice in ch.control.options:  # a student may try every setting before predicting
        if choice == ch.control.default:
            continue
        at.segmented_control(key=f"sv_w_lab_try_{number}").set_value(choice).run()
        here = ch.present(lab.stored(ch, SOURCES), choice)
        text, data, _ = seen(at)
        assert "predict" not in at.query_params and leaks(text, secrets | secret_strings(ch, here)) == [], (number, choice)
        assert carried(data, hidden_before(number), here, SECRETS[number][0]) == [], (number, choice)
    at.segmented_control(key=f"sv_w_lab_try_{number}").set_value(ch.control.default).run()
    # the same surfaces after the prediction and the reveal: the check finds the answer where it is shown
    at.radio(key=f"sv_w_lab_predict_{number}").set_value(ch.predict.options[0]).run()
    at.button(key=f"sv_w_lab_reveal_{number}").click().run()
    text, data, _ = seen(at)
    assert leaks(text, secrets) and carried(data, HIDDEN[number], built, SECRETS[number][0]), number
    metrics = {m.label for m in at.sidebar.metric}  # the sidebar's summary is back, with the revealed chapters' numbers
    assert "accuracy" in metrics and ("as_n model" in metrics) == (number == 1) and ("mean Blowup" in metrics) == (number == 3)


def hidden_before(number: int) -> set[str]:
    """What no chart of chapter `number` may carry before its reveal: its own `HIDDEN`, and every earlier chapter's
    answer as a chart would draw it (`EARLIER`; a student may open chapter 7 first)."""
    return HIDDEN[number].union(*(EARLIER.get(k, set()) for k in range(1, number)))


def test_no_title_names_what_its_answer_turns_on():
    """A chapter's title is on the page, the tabs' tooltips and the handout's front before the prediction."""
    for ch in lab.CHAPTERS:
        assert not [w for w in TELLS.get(ch.number, ()) if w in ch.title.lower()], ch.title
        assert leaks(ch.title, secret_strings(ch, cache_built(ch.number))) == [], ch.title


def cache_built(number: int) -> lab.Built:
    ch = lab.chapter(number)
    return ch.present(lab.stored(ch, SOURCES), ch.control.default)


def test_the_leak_check_finds_a_planted_answer():
    """The check itself: the answer printed anywhere, in any of the page's formats, is found; a setting is not."""
    ch, built = lab.chapter(3), cache_built(3)
    secrets = secret_strings(ch, built)
    value = built.numbers["blowup_parity"]
    assert leaks(f"mean Blowup: {value:.4g}", secrets) and leaks(f"E = {value:.4g}.", secrets)
    assert leaks(f"mean {value:.2f}", secrets) and not leaks(f"mean {value:.2f}1", secrets)
    assert leaks(f"N is {built.claims['factors']} here", secrets)
    assert leaks("n = 12 · 4096 inputs", secrets) == []
    frame = pd.DataFrame({"model": ["PARITY"], "x": [built.numbers["mean_N_parity"]]})
    assert carried([frame], HIDDEN[3], built, SECRETS[3][0]) == ["value " + str(float(built.numbers["mean_N_parity"]))]
    assert carried([frame.rename(columns={"x": "mean_N"})], HIDDEN[3], built, ())


def test_the_student_handout_shows_no_answer_before_its_back_section():
    """On paper: each chapter's front section (its text, and the charts printed in it with their data) holds none
    of its own or an earlier chapter's answer-bearing facts (the student turns to the back only once every
    prediction is ticked); the back section does (the check finds them there), with each chapter's answer."""
    from sensviz import handout

    page = handout.handout(SOURCES)
    specs = json.loads(re.search(r"const specs = (\[.*?\]);\n", page, flags=re.S).group(1))
    assert re.search(r"\.theorem \{ break-inside: avoid;", page)  # printed on one page
    front, back = page.split('<section class="back"', 1)
    back = back[:back.index("<script>")]
    for ch in lab.CHAPTERS:
        built = cache_built(ch.number)
        secrets = {}
        for k in range(1, ch.number + 1):
            secrets |= secret_strings(lab.chapter(k), cache_built(k), own=k == ch.number)
        section = front[front.index(f'<section id="chapter-{ch.number}"'):]
        section = section[:section.index("</section>")]
        shown = [pd.DataFrame(rows) for i in map(int, re.findall(r'id="chart-(\d+)"', section))
                 for rows in specs[i].get("datasets", {}).values()]
        assert leaks(section, secrets) == [] and carried(shown, hidden_before(ch.number) | EARLIER.get(ch.number, set()), built,
                                                         SECRETS[ch.number][0]) == [], ch.number
        assert html.escape(built.answer) in back and html.escape(built.look_for) in back, ch.number
        if ch.theorem_symbols:  # the theorem and its "where" in one block kept on a page (not split across two)
            where = back.index(f'<p class="terms">where {html.escape("; ".join(ch.theorem_symbols))}.</p>')
            block = back[back.rindex('<div class="theorem">', 0, where):where]
            assert mathml(ch.theorem[0]) in block and block.count("</div>") == 1, ch.number
    everything = [pd.DataFrame(rows) for i in map(int, re.findall(r'id="chart-(\d+)"', back))
                  for rows in specs[i].get("datasets", {}).values()]
    assert all(carried(everything, HIDDEN[ch.number], cache_built(ch.number), SECRETS[ch.number][0]) for ch in lab.CHAPTERS)


def summary_shown(at) -> tuple[set[str], str]:
    """The sidebar summary's metrics (labels) and its captions, as a student sees them."""
    return {m.label for m in at.sidebar.metric}, " ".join(c.value for c in at.sidebar.caption)


def test_the_explorers_sidebar_shows_a_chapters_answer_only_once_that_chapter_is_revealed():
    """`ui.lab_state.withheld`: for a student of the Lab, the sidebar's summary on any page (here the Sensitivity page,
    opened from chapter 1 after its reveal) shows as_n once chapter 1 is revealed and param_norm and mean Blowup
    (chapter 3's answer) once chapter 3 is; its line says which chapter they wait for. The page's own button appears
    only with the answer. A session that never opened the Lab sees every number."""
    at = before_the_prediction(1)
    assert "sv_w_lab_open_1" not in {b.key for b in at.button}
    at.button(key="sv_w_lab_skip_1").click().run()
    at.button(key="sv_w_lab_open_1").click().run()
    assert not at.exception and at.title[0].value == "Sensitivity"
    metrics, captions = summary_shown(at)
    assert {"accuracy", "as_n model", "as_n target"} <= metrics and not metrics & {"mean Blowup", "param_norm"}
    assert "Waiting for your answer in the Lab: param_norm, mean Blowup (chapter 3)." in captions
    assert "mean Blowup" not in captions.replace("mean Blowup (chapter 3)", "") and "as_n 1.000" in captions  # FIRST's
    goto(at, "lab")
    at.segmented_control(key="sv_w_lab_chapter").set_value(3).run()
    at.button(key="sv_w_lab_skip_3").click().run()
    goto(at, "sensitivity")
    metrics, captions = summary_shown(at)
    assert {"as_n model", "param_norm", "mean Blowup"} <= metrics and "Waiting" not in captions
    assert "mean Blowup" in captions  # the compared model's
    fresh = open_url("sensitivity", model=at.query_params["model"])  # never opened the Lab
    assert {"as_n model", "param_norm", "mean Blowup"} <= summary_shown(fresh)[0]


def test_a_class_members_new_session_withholds_the_answers_before_it_opens_the_lab():
    """A restart (or a reload) starts a new session that has not opened the Lab: a member of a class is still a
    student of the Lab, so the sidebar waits for chapters 1 and 3 as before; the class's instructor sees them."""
    import secrets

    from helpers.app import APP, PAGE
    from streamlit.testing.v1 import AppTest

    from server import services
    from ui import registry

    room = services.class_store().create(f"Leak lab {secrets.token_hex(4)}", "teacher-of-the-leak-lab")
    services.class_store().join(room.code, "Cy", "cy-browser")

    def new_session(owner: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=300)
        at.session_state[registry.OWNER] = owner
        at.query_params.update({"model": "encoder-parity-n6", "class": room.code})
        at.switch_page(PAGE["sensitivity"].file)
        return at.run()

    metrics, captions = summary_shown(new_session("cy-browser"))
    assert not metrics & {"as_n model", "param_norm", "mean Blowup"} and "Waiting for your answer in the Lab" in captions
    assert {"as_n model", "param_norm", "mean Blowup"} <= summary_shown(new_session("teacher-of-the-leak-lab"))[0]
