"""The QueerBench demo Space: evaluate any masked or causal LM by Hub id, and a playground for your own templates.

``space/app.py`` only imports :func:`build_demo`; every piece of logic lives in this package so that it is tested
with the library: :mod:`.models` (settings, the model check, the model cache), :mod:`.evaluate` and
:mod:`.playground` (one module per tab, each with its function and its UI), :mod:`.ui` (what the tabs share) and
:mod:`.app` (the Blocks that hold the tabs). The Space reuses the benchmark's own pieces (:class:`~queerbench.run.pipeline.RunOptions`,
:func:`~queerbench.run.scores.score_predictions`, :func:`~queerbench.models.masked.predict.predict`, the report's table and figure) and adds
what a public demo needs on top:

- a model check *before* anything is downloaded: the Hub id exists, is a masked LM (run with ``mlm``) or a causal
  LM (run with ``scored``: candidates ranked by whole-sentence probability, :mod:`queerbench.models.causal_blanks.local`), has
  safetensors weights (pickle checkpoints can run code when loaded) and stays under a size cap;
  ``trust_remote_code`` is never used; the status line says which method ran;
- local folders only when ``QUEERBENCH_SPACE_ALLOW_LOCAL=1`` (tests and self-hosting; never on a public Space);
- the "Evaluate" tab runs the fill-in-the-blank tasks and the ``requests`` tasks of the default suite, the latter on
  the request runner (:func:`~queerbench.run.requests.run_requests`) with the cached model, its table from the
  task's declared metrics;
- a bounded LRU cache of loaded models and a concurrency limit on the events that run models;
- completions flagged as harmful (HurtLex categories or toxicity flags) hidden until the user asks to see them,
  under the content note the paper gives;
- every failure shown as a message, never as a traceback: in the tab's status line (what failed and why) for the
  page's buttons, as ``gr.Error`` for API callers (the ``evaluate`` and ``playground`` endpoints);
- the embedded model (``embedded:smollm2-135m-instruct``) runs without the Hub, and a Hub that cannot be reached is
  one message naming it.

Settings (environment variables, read when the app is built or a model is checked):
``QUEERBENCH_SPACE_ALLOW_LOCAL`` (``1`` allows local folders), ``QUEERBENCH_SPACE_MAX_PARAMS`` (default 600M),
``QUEERBENCH_SPACE_MAX_BYTES`` (weights on disk, default 2.5 GB), ``QUEERBENCH_SPACE_CACHE_SIZE`` (models kept loaded,
default 2), ``QUEERBENCH_SPACE_CONCURRENCY`` (model runs at once, default 1), ``QUEERBENCH_SPACE_QUICK_TEMPLATES``
(templates in a quick run, default 12), ``HF_ENDPOINT`` (the Hub to check ids against).
"""

from queerbench.hub.space.app import build_demo, launch_kwargs
from queerbench.hub.space.evaluate import EvaluationResult, evaluate_model
from queerbench.hub.space.models import ModelCache, ModelCheck, SpaceSettings, check_model
from queerbench.hub.space.playground import playground, render_template, subject_choices
from queerbench.hub.space.ui import HIDDEN, SUBJECT, SpaceError, sentence_view

__all__ = [
    "HIDDEN",
    "SUBJECT",
    "EvaluationResult",
    "ModelCache",
    "ModelCheck",
    "SpaceError",
    "SpaceSettings",
    "build_demo",
    "check_model",
    "evaluate_model",
    "launch_kwargs",
    "playground",
    "render_template",
    "sentence_view",
    "subject_choices",
]
