"""The glossary: every term the explorer's pages, the Lab and its handout use, with a one-line definition.

One source: the About page draws its glossary table from `TERMS`, the Lab defines each term where a
chapter first uses it (`definition`), and the handout prints the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """A term: its name as the pages write it, its symbol, a one-line definition, and where it is shown."""

    name: str
    symbol: str
    definition: str
    where: str


TERMS: tuple[Term, ...] = (
    Term("PARITY", "PARITY(x)", "1 when an odd number of the n input bits are 1, else 0.", "Train; the zoo"),
    Term("FIRST", "FIRST(x)", "the first input bit, copied.", "Train; the zoo"),
    Term("MAJORITY", "MAJORITY(x)", "1 when more than half of the n bits are 1.", "Train; the zoo"),
    Term("MEAN", "MEAN(x)", "the fraction of bits that are 1 (a real number, not a yes/no answer).",
         "Train; the zoo"),
    Term("sensitivity", "s(f,x)", "how many of the n single-bit flips of the input x change the output f(x).",
         "Sensitivity: the cube map, the histogram, by Hamming weight"),
    Term("average sensitivity", "as_n(f)", "s(f,x) averaged over all 2^n inputs x: from 0 (a constant: no flip "
         "ever changes f) to n (each of the n flips changes f, whatever x is).", "sidebar summary; Sensitivity"),
    Term("influence", "Inf_i(f)", "how often flipping bit i changes the output: E((f(x) − f(x^i))/2)².",
         "Sensitivity: per position"),
    Term("Fourier degree", "k, d_k", "f written as a sum of products of k input bits; d_k is the share of f's "
         "weight on products of exactly k bits (the d_k add up to 1).", "Sensitivity: Fourier degree profile"),
    Term("attention", "â_ij", "how much position i reads from position j, per layer and head.", "Attention"),
    Term("LayerNorm factor", "N_i^(k)", "1/√(variance + ε) of LayerNorm k's input at position i: how much that "
         "LayerNorm magnifies small differences.", "LayerNorm: heatmap and distributions"),
    Term("Blowup", "Blowup(x)", "how much the LayerNorms, all layers together, can magnify a change at input x: "
         "the product over LayerNorms k of τ^(k)(x) = max_i (1 + N_i^(k)(x)), where N_i^(k)(x) is LayerNorm k's "
         "factor at position i, 1/√(variance + ε) of what it normalises there.", "LayerNorm"),
    Term("param_norm", "‖θ‖", "the size (Euclidean norm) of all parameters except the positional encodings.",
         "sidebar; LayerNorm trade-off"),
    Term("sharpness", "L_ρ", "the mean squared change of the output when all parameters are moved by a "
         "random step of length ρ: large means a sharp (narrow) minimum.", "Landscape"),
    Term("radius", "ρ", "the length of that random parameter step; the paper's is ρ = 0.02·√P (P parameters).",
         "Landscape"),
    Term("sharpness proxy", "proxy ×4", "the paper's estimate of sharpness: the output's mean squared change "
         "under Gaussian noise of 0.02 per parameter (L_ρ moves the parameters by a random step of fixed length ρ "
         "instead; the noise's typical length is the paper's radius); ×4 puts a model trained on 0/1 targets on the ±1 scale "
         "(y ↦ 2y − 1 turns a change Δy into 2Δy, and (2Δy)² = 4Δy²).", "Experiments; Lab chapter 5"),
    Term("initialisation", "θ₀", "the random parameters a model starts training from (PyTorch's default draw, "
         "seeded): before any training.", "Before training; Lab chapter 7"),
    Term("init scale", "s", "a factor on every initial parameter except the LayerNorms' (1: PyTorch's default).",
         "Before training; Lab chapter 7"),
    Term("function-preserving change", "g θ", "a change of the parameters that leaves the output the same at every "
         "input, e.g. one layer's weights ×2 and the next one's ÷2; it can change the sharpness, not the function.",
         "Lab chapter 7"),
    Term("convergence filter", "converged", "the paper keeps only runs whose final evaluation MSE is below "
         "0.001 (on 0/1 targets): the model fits its task.", "Experiments; Lab chapter 5"),
)
"""Every term, in the order a reader meets them."""

_BY_NAME = {t.name.lower(): t for t in TERMS}


def term(name: str) -> Term:
    """The term of this name (case ignored); KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise KeyError(f"no glossary term '{name}' (known: {', '.join(t.name for t in TERMS)})") from None


def definition(name: str) -> str:
    """One line: the term, its symbol where it differs, and its definition."""
    t = term(name)
    symbol = f" ({t.symbol})" if t.symbol != t.name and t.symbol not in (f"{t.name}(x)",) else ""
    return f"{t.name}{symbol}: {t.definition}"
