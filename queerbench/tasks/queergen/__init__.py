"""QueerGen (Sosto et al., Findings of EACL 2026) alongside QueerBench.

The ``queergen`` config: QueerGen's 3,100 sentences (10 subjects × (unmarked + 30 markers) × 10 templates) built
from its pinned files, its scorers' aggregation (group means with 95% t-CIs, one-way ANOVA per model, JSD between
group vocabularies, batched type-token diversity) and the reader for its stored per-sentence evaluation files, so
that ``queerbench score <QueerGen evaluation csv> --config queergen --toxicity precomputed`` regenerates its
published tables. Where QueerGen's code and paper disagree, ``queergen`` follows the code and ``default`` the paper
(see :mod:`queerbench.tasks.queergen.spec`). QueerGen's files are "academic research only": they are fetched from the
pinned public source (``lexicons/sources.json``), never stored in this repository.
"""

from queerbench.tasks.queergen.spec import GROUP_ORDER, QueerGenSpecError, spec

__all__ = ["GROUP_ORDER", "QueerGenSpecError", "spec"]
