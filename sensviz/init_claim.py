"""The claim about initialisations, decided by a stated rule from initialisation studies (`sensviz.init_study`).

Claim (Bhattamishra et al., ACL 2023; the paper's "randomly initialized transformers tend to occupy
parameter regions with low sensitivity"): random initialisations compute low-sensitivity functions,
their average sensitivity as_n(f) well below n/2, the value of a uniformly random Boolean function.

Rule, fixed before any study is run. The unit is one initialisation (one seed); f is the scale-free
sign function of each initialisation. "Well below" means below n/2 by a fixed margin of `MARGIN` n,
i.e. as_n(f) / n < 1/2 - MARGIN = 0.4. In each cell (one architecture, n and init scale) the
per-initialisation differences y = as_n(f) / n - (1/2 - MARGIN) get a one-sample t interval
(`sensviz.stats.mean`), decided at alpha = `ALPHA` by `sensviz.stats.decide` with direction -1 (a
one-sided question read off the two-sided 95 % interval): "reproduced" when the interval lies below
zero, "differs" when it lies above, else "not resolved at this scale". Across cells: "reproduced"
when every cell is reproduced, "differs" when any cell differs, else not resolved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import stats
from .init_study import InitStudy
from .records import Record

CLAIM = ("random initialisations compute low-sensitivity functions: average sensitivity well below n/2, "
         "the value of a random Boolean function")
MARGIN = 0.1
"""How far below n/2, as a fraction of n, "well below" is: as_n / n < 0.4."""
ALPHA = 0.05
RULE = (f"per cell (architecture, n, init scale), one-sample t interval over initialisations of as_n(f)/n - "
        f"{0.5 - MARGIN:g} at alpha {ALPHA:g}: below 0 reproduced, above 0 differs, else not resolved; across cells "
        f"reproduced iff every cell is, differs if any cell does")


@dataclass
class InitCell(Record):
    """One cell of the claim: its setting, the interval of mean as_n/n - (1/2 - MARGIN), its verdict."""

    arch: str
    n: int
    init_scale: float
    n_inits: int
    mean_ratio: float  # mean as_n(f) / n over initialisations
    low: float  # 95 % interval of mean_ratio - (1/2 - MARGIN)
    high: float
    verdict: str


@dataclass
class InitClaim(Record):
    """The claim, its rule, each cell and the verdict across cells."""

    claim: str
    rule: str
    cells: list[InitCell]
    verdict: str


def decide_cell(study: InitStudy) -> InitCell:
    """The verdict of one study by the module's rule."""
    ratio = study.avg_sensitivity.double() / study.n
    interval = stats.mean((ratio - (0.5 - MARGIN)).numpy(), unit="initialisations")
    low, high = interval.bounds(1 - ALPHA)
    return InitCell(arch=study.arch, n=study.n, init_scale=study.init_scale, n_inits=study.n_inits,
                    mean_ratio=ratio.mean().item(), low=low, high=high, verdict=stats.decide(interval, -1, ALPHA))


def decide_init_claim(studies: Sequence[InitStudy]) -> InitClaim:
    """The claim decided across the studies' cells (see the module docstring)."""
    if not studies:
        raise ValueError("the claim needs at least one initialisation study")
    cells = [decide_cell(study) for study in studies]
    verdicts = {cell.verdict for cell in cells}
    if stats.DIFFERS in verdicts:
        verdict = stats.DIFFERS
    elif verdicts == {stats.REPRODUCED}:
        verdict = stats.REPRODUCED
    else:
        verdict = stats.UNRESOLVED
    return InitClaim(claim=CLAIM, rule=RULE, cells=cells, verdict=verdict)
