"""LaTeX formulas as MathML, for pages that must typeset offline (the Lab's handout).

A small converter for the LaTeX the Lab writes: letters, digits and operators, `_` and `^` with
`{groups}`, `\\frac`, `\\sqrt`, `\\hat`, `\\mathrm`/`\\text`/`\\mathbb`, Greek letters and the common
symbols. Browsers draw MathML natively, so nothing is loaded. An unknown command is kept as its
name in text, never dropped.
"""

from __future__ import annotations

import html
import re

SYMBOLS = {
    "rho": "ρ", "sigma": "σ", "varepsilon": "ε", "epsilon": "ϵ", "lambda": "λ", "tau": "τ", "theta": "θ",
    "Delta": "Δ", "Omega": "Ω", "nu": "ν", "chi": "χ", "alpha": "α", "beta": "β",
}
OPERATORS = {
    "oplus": "⊕", "neq": "≠", "ge": "≥", "le": "≤", "ll": "≪", "to": "→", "Rightarrow": "⇒", "infty": "∞",
    "sum": "∑", "prod": "∏", "cdot": "·", "|": "‖", "#": "#", "{": "{", "}": "}", "in": "∈", "subseteq": "⊆",
}
FUNCTIONS = {"max", "min", "lim", "liminf", "log", "exp"}
LIMITS = {"max", "min", "lim", "liminf", "sum", "prod"}
"""Operators whose scripts go under and over them in a displayed formula (lim_{n → ∞}, ∑_i), as LaTeX sets them."""
SPACES = {",", ";", "quad", "qquad", "big", "Big", "textstyle", "left", "right"}
TOKEN = re.compile(r"\\([A-Za-z]+|.)|([A-Za-z])|(\d+(?:\.\d+)?)|(\s+)|(.)")


def _tokens(latex: str) -> list[tuple[str, str]]:
    out = []
    for command, letter, number, _space, other in TOKEN.findall(latex):
        if command:
            out.append(("cmd", command))
        elif letter:
            out.append(("mi", letter))
        elif number:
            out.append(("mn", number))
        elif other:
            out.append(("ch", other))
    return out


class _Parser:
    def __init__(self, latex: str):
        self.tokens, self.at = _tokens(latex), 0

    def peek(self):
        return self.tokens[self.at] if self.at < len(self.tokens) else (None, None)

    def take(self):
        token = self.peek()
        self.at += 1
        return token

    def row(self, closing: str | None = None) -> str:
        parts, spaced = [], False
        while self.peek()[0] is not None and self.peek() != ("ch", closing):
            if self.peek() == ("ch", "}") and closing is None:
                self.take()
                continue
            if spaced and self.peek() != ("ch", "("):  # "lim inf L", as TeX spaces an operator; "log(x)" not
                parts.append('<mspace width="0.17em"/>')
            kind, name = self.peek()
            spaced = kind == "cmd" and name in FUNCTIONS
            parts.append(self.scripted())
        if closing is not None:
            self.take()
        return parts[0] if len(parts) == 1 else f"<mrow>{''.join(parts)}</mrow>"

    def argument(self) -> str:
        if self.peek() == ("ch", "{"):
            self.take()
            return self.row("}")
        return self.atom()

    def scripted(self) -> str:
        """The next atom with its `_` and `^` scripts: beside it, or under and over it for `LIMITS`."""
        under = self.peek()[0] == "cmd" and self.peek()[1] in LIMITS
        base = self.atom()
        sub = sup = None
        while self.peek() in (("ch", "_"), ("ch", "^")):
            kind = self.take()[1]
            if kind == "_":
                sub = self.argument()
            else:
                sup = self.argument()
        low, high = ("munder", "mover") if under else ("msub", "msup")
        if sub is not None and sup is not None:
            return f"<{'munderover' if under else 'msubsup'}>{base}{sub}{sup}</{'munderover' if under else 'msubsup'}>"
        if sub is not None:
            return f"<{low}>{base}{sub}</{low}>"
        if sup is not None:
            return f"<{high}>{base}{sup}</{high}>"
        return base

    def atom(self) -> str:
        kind, value = self.take()
        if kind == "mi":
            return f"<mi>{value}</mi>"
        if kind == "mn":
            return f"<mn>{value}</mn>"
        if kind == "ch":
            if value == "{":
                return self.row("}")
            return f"<mo>{'−' if value == '-' else html.escape(value)}</mo>"  # a minus sign, not a hyphen
        if kind is None:
            return "<mrow></mrow>"
        return self.command(value)

    def command(self, name: str) -> str:
        if name == "frac":
            return f"<mfrac>{self.argument()}{self.argument()}</mfrac>"
        if name == "sqrt":
            return f"<msqrt>{self.argument()}</msqrt>"
        if name == "hat":
            return f'<mover accent="true">{self.argument()}<mo>^</mo></mover>'
        if name in ("mathrm", "text", "operatorname"):
            return f"<mtext>{html.escape(self._raw())}</mtext>"
        if name == "mathbb":
            return f'<mi mathvariant="double-struck">{html.escape(self._raw())}</mi>'
        if name == "tfrac":
            return f"<mfrac>{self.argument()}{self.argument()}</mfrac>"
        if name in SYMBOLS:
            return f"<mi>{SYMBOLS[name]}</mi>"
        if name in OPERATORS:
            return f"<mo>{html.escape(OPERATORS[name])}</mo>"
        if name in FUNCTIONS:
            return f"<mi>{'lim inf' if name == 'liminf' else name}</mi>"
        if name in SPACES:
            return '<mspace width="0.3em"/>' if name in (",", ";", "quad", "qquad") else "<mrow></mrow>"
        return f"<mtext>{html.escape(name)}</mtext>"

    def _raw(self) -> str:
        """The text of a `{...}` argument as it is (for \\mathrm and the like)."""
        if self.peek() != ("ch", "{"):
            return self.take()[1] or ""
        self.take()
        text, depth = [], 1
        while self.peek()[0] is not None:
            kind, value = self.take()
            if (kind, value) == ("ch", "{"):
                depth += 1
            elif (kind, value) == ("ch", "}"):
                depth -= 1
                if depth == 0:
                    break
            text.append(value)
        return "".join(text)


def mathml(latex: str, display: bool = True) -> str:
    """A LaTeX formula as a `<math>` element (a block with `display`)."""
    body = _Parser(latex).row()
    mode = ' display="block"' if display else ""
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML"{mode}>{body}</math>'
