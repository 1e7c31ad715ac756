"""queerbench: measure how language models harm and stereotype LGBTQIA+ people.

The library behind the QueerBench dataset, the ``evaluate`` metric and the Gradio Space. Every piece of logic lives
here once; the Hub folders (``dataset_builder/``, ``metric_queerbench/``, ``space/``) are thin wrappers.
"""

__version__ = "0.1.0"
