"""queerbench: measure how language models harm and stereotype LGBTQIA+ people.

The library behind the QueerBench dataset, the ``evaluate`` metric and the Gradio Space. Every piece of logic lives
here once; the Hub folders (``dataset_builder/``, ``metric_queerbench/``, ``space/``) are thin wrappers.
"""

__version__ = "0.1.0"

CONFIGS: tuple[str, ...] = ("default", "paper", "queergen")
"""The configurations that run through the whole project: ``default`` (the method done right), ``paper``
(the paper's procedure and rules, bugs included: scored with the paper's stored toxicity flags, its
evaluation files give the published Table 4 bit for bit) and ``queergen`` (QueerGen's 3,100 sentences, groups
``unmarked``/``non-queer``/``queer``, scored as QueerGen's code does; see :mod:`queerbench.tasks.queergen`)."""


def check_config(config: str) -> str:
    """Return ``config`` if it names a known configuration, else raise ``ValueError`` naming the choices."""
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; choose one of: {', '.join(CONFIGS)}")
    return config
