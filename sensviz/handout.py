"""The Lab on paper: one offline HTML page to print (`handout`), in a student's copy and an instructor's.

The student's copy asks before it shows, as the app does: each chapter's question, its words and symbols,
the prediction to tick, the definitions, and a box of eight ruled lines for the answer, kept on one page with
its question. Its front pages print no chart: a later chapter's chart, even blind, can carry an earlier one's
answer (chapter 7's trained PARITY model at as_n = n is chapter 1's). Every chart, with each chapter's right
prediction, what to look for, the answer and the theorem that predicts it, is printed in the back section,
which starts on a page of its own. The instructor's copy (`answers=True`) prints each chapter's charts in
place, with its answer.
Links name the address the server was reached at (`url`), or only the chapter's path.
"""

from __future__ import annotations

import html
from pathlib import Path

from .lab import CHAPTERS, Built, Chapter, Sources, read_store, stored
from .mathml import mathml
from .report import offline_page, write_text

LINE = 1.5  # em: one ruled line of an answer box
BOX_LINES = 8

STYLE = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #111; line-height: 1.5; }}
h2 {{ border-bottom: 1px solid #777; padding-bottom: 0.2em; margin-top: 1.6em; }}
.question {{ font-size: 1.1em; font-style: italic; }} .predict {{ background: #f2f4f8; padding: 0.6em 0.9em; }}
.terms {{ font-size: 0.92em; color: #222; }} .caption {{ color: #333; font-size: 0.92em; }}
.formula {{ background: #fafafa; padding: 0.5em; overflow-x: auto; font-size: 1.35em; line-height: 2; }}
.chart {{ margin: 0.6em 0 1.2em 0; }} .answer {{ border-left: 4px solid #2a7; padding-left: 0.8em; }}
.box {{ border: 1px solid #555; height: {BOX_LINES * LINE}em; margin: 0.5em 0 1em 0; padding: 0 0.4em;
       background: repeating-linear-gradient(to bottom, transparent 0, transparent calc({LINE}em - 1px),
                   #aaa calc({LINE}em - 1px), #aaa {LINE}em); }}
.options {{ list-style: none; padding-left: 0.5em; }} .options li::before {{ content: "☐  "; }}
.back {{ margin-top: 3em; }}
@media print {{
  body {{ max-width: none; margin: 0; font-size: 11pt; }}
  h1 {{ font-size: 1.5em; margin: 0 0 0.3em 0; }} h2 {{ margin-top: 0.8em; }}
  nav, .screen {{ display: none; }}
  h2, h3 {{ break-after: avoid; page-break-after: avoid; }}
  .back {{ break-before: page; page-break-before: always; margin-top: 0; }}
  .chart, figure, .predict, .respond, .formula, .answer, .terms, .shown, .ask, .keep, .theorem {{ break-inside: avoid;
    page-break-inside: avoid; }}
  a {{ color: #111; }}
}}
"""


def live_link(number: int, url: str | None) -> str:
    """The chapter in the app: at `url` (the server's address), else its path only."""
    return f"{url.rstrip('/') if url else ''}/lab?chapter={number}"


def _lines(items) -> str:
    return "<br>".join(html.escape(line) for line in items)


class _Charts:
    """The page's charts in order: each drawn into `#chart-<i>` from its spec."""

    def __init__(self):
        self.specs: list[dict] = []

    def place(self, chart, title: str, caption: str, kind: str) -> list[str]:
        """One chart under its title, with its caption; `kind`: "answer-chart" (it carries an answer)."""
        self.specs.append(chart.to_dict())
        return [f'<div class="shown"><h3>{html.escape(title)}</h3>',
                f'<div class="chart {kind}" id="chart-{len(self.specs) - 1}"></div>',
                f'<p class="caption">{html.escape(caption)}</p></div>' if caption else "</div>"]


def _theorem(ch: Chapter) -> list[str]:
    """The chapter's theorem and the words of its symbols, kept on one page (a formula apart from its "where" reads
    as nothing on paper)."""
    if not ch.theorem:
        return []
    return ['<div class="theorem"><div class="formula">' + "".join(mathml(line) for line in ch.theorem) + "</div>",
            f'<p class="terms">where {html.escape("; ".join(ch.theorem_symbols))}.</p>' if ch.theorem_symbols else "",
            "</div>"]


def _front(ch: Chapter, built: Built, charts: _Charts, answers: bool, url: str | None) -> str:
    """A chapter where the student meets it: the question first, then (student's copy) its words, formula, the
    prediction and the box to answer in, all on one page; (instructor's copy) the prediction, its charts, formula and
    answer."""
    predict = (f'<div class="predict"><b>Predict first.</b> {html.escape(ch.predict.prompt)}<ul class="options">'
               + "".join(f"<li>{html.escape(o)}</li>" for o in ch.predict.options) + "</ul></div>")
    formula = '<div class="formula">' + "".join(mathml(line) for line in ch.formula) + "</div>"
    ask = [f'<div class="ask"><h2>{ch.number}. {html.escape(ch.title)}</h2>',
           f'<p class="question">{html.escape(ch.question)}</p></div>',
           f'<p class="terms">{_lines((*ch.definitions(), *ch.symbols))}</p>']
    if answers:
        body = [*ask, predict, *(line for fig in built.figures
                                 for line in charts.place(fig.chart, fig.title, fig.caption, "answer-chart")),
                formula, _answer(ch, built)]
    else:  # the question, its words and the box to answer in on one page
        body = ['<div class="keep">', *ask, formula, predict,
                '<div class="respond"><p><b>Then, with the charts of the back section: what do they show? Was your '
                'prediction right, and why?</b></p><div class="box"></div></div></div>']
    live = live_link(ch.number, url)
    return "\n".join([f'<section id="chapter-{ch.number}">', *body,
                      f"<p><b>Try it yourself:</b> {html.escape(ch.try_it)} Live chapter: "
                      f'<a href="{html.escape(live)}">{html.escape(live)}</a></p></section>'])


def _answer(ch: Chapter, built: Built) -> str:
    """A chapter's right prediction, what to look for, the answer's paragraph and the theorem behind it."""
    return "".join([f'<div class="answer"><p><b>Right prediction:</b> {html.escape(built.correct)}</p>'
                    f"<p><b>What to look for.</b> {html.escape(built.look_for)}</p>"
                    f"<p><b>Answer.</b> {html.escape(built.answer)}</p>",
                    f"<p><b>The rule that decides the answer:</b> {html.escape(ch.rule)}</p>", *_theorem(ch), "</div>"])


def _back(chapters: list[tuple[Chapter, Built]], charts: _Charts) -> str:
    """The student's back section: each chapter's charts, then its answer and the theorem behind it."""
    parts = ['<section class="back" id="back"><h2>After you predicted: the charts and the answers</h2>',
             "<p>Turn here only once every prediction in front is ticked.</p>"]
    for ch, built in chapters:
        parts.append(f'<section class="back-chapter"><h3>Chapter {ch.number}. {html.escape(ch.title)}</h3>')
        for fig in built.figures:
            parts += charts.place(fig.chart, fig.title, fig.caption, "answer-chart")
        parts += [_answer(ch, built), "</section>"]
    return "\n".join([*parts, "</section>"])


def handout(sources: Sources, answers: bool = False, url: str | None = None) -> str:
    """The whole lab as one offline HTML page to print: the student's copy (the answer-bearing charts in the back
    section), or with `answers` the instructor's (charts and answers in place). `url`: the app's address for
    the links to each chapter (None: the chapter's path only)."""
    store = read_store(sources.checkpoints)
    chapters = []
    for ch in CHAPTERS:
        found = stored(ch, sources, store)
        chapters.append((ch, ch.present(found if found is not None else ch.measure(sources, None), ch.control.default)))
    charts = _Charts()
    sections = [_front(ch, built, charts, answers, url) for ch, built in chapters]
    if not answers:
        sections.append(_back(chapters, charts))
    toc = "".join(f'<li><a href="#chapter-{c.number}">{html.escape(c.title)}</a></li>' for c in CHAPTERS)
    return offline_page(
        "sensviz lab: why sensitive functions are hard for transformers" + (" (with answers)" if answers else ""),
        STYLE,
        [f"<h1>Why are sensitive functions hard for transformers? A lab in {len(CHAPTERS)} chapters</h1>",
         "<p>Hahn &amp; Rofin (ACL 2024), with models trained by sensviz. In each chapter, read the question and "
         "tick a prediction <i>before</i> you look at the charts. Every number is computed from the models shown."
         + (" This is the instructor's copy: the answers are included." if answers else
            " The charts and the answers are in the back section.")
         + " This page loads nothing from the internet.</p>",
         f'<nav class="screen"><ol>{toc}</ol></nav>', *sections],
        charts.specs)


def write_handout(out: str | Path, answers: bool = False, checkpoints: str | Path | None = None,
                  results: str | Path | None = None, url: str | None = None) -> dict:
    """Write the handout of the zoo in `checkpoints` and the `results` (defaults: the shipped ones) to `out`."""
    page = handout(Sources.shipped(checkpoints, results), answers, url)
    out = write_text(out, page)
    return {"written": str(out), "chapters": len(CHAPTERS), "answers": answers, "bytes": out.stat().st_size,
            "figures": page.count('class="chart ')}
