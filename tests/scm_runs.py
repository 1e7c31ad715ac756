"""Run the SCM probes in a test as a library caller does: the task's plan (:meth:`Task.probe_plan`, its settings as
keywords) on the shared probe runner (:func:`queerbench.run.probes.run_probes`), in one call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from queerbench.cli.probes import MODEL_FLAGS
from queerbench.run.probes import model_label, run_probes
from queerbench.tasks import get_task

_RUNNER_KEYS = (*MODEL_FLAGS, "backend", "cache_path", "log")


def run_scm(out: str | Path, **settings: Any) -> dict[str, Any]:
    """The SCM run of ``settings`` (the plan's keywords and the runner's) into ``out``; returns its record."""
    runner_kw = {k: settings.pop(k) for k in _RUNNER_KEYS if k in settings}
    endpoint = runner_kw.get("endpoint")
    if "api_key_env" in runner_kw:
        settings["api_key_env"] = runner_kw["api_key_env"]
    task = get_task("scm")
    plan = task.probe_plan(model_label(runner_kw.get("model"), endpoint), endpoint=bool(endpoint), **settings)
    return run_probes(task, out, plan, **runner_kw)


def reanalyze(run_dir: str | Path, **settings: Any) -> dict[str, Any]:
    """``queerbench scm report`` as a library call: the stored replies read again with the plan of ``settings``."""
    from queerbench.run.probes import reanalyze_probes

    task = get_task("scm")
    return reanalyze_probes(task, run_dir, task.probe_plan("embedded", **settings))


def endpoint_scm(
    url: str, out: str | Path, model: str, mapper_factory: Any, *, survey_samples: int = 1, limit: int = 7
) -> dict[str, Any]:
    """An SCM run of ``model`` served at ``url`` (a test's fake server): the paper's decoding for its family with
    ``survey_samples`` replies per survey prompt and one per story, ``limit`` prompts per split, two requests in
    flight, quietly."""
    from queerbench.tasks.scm.pipeline import resolve_settings

    survey, story, prov = resolve_settings(model, survey_samples=survey_samples, story_samples=1)
    return run_scm(
        out,
        endpoint=url,
        model=model,
        settings=survey,
        story_settings=story,
        provenance=prov,
        limit=limit,
        concurrency=2,
        requests_per_minute=100_000,
        mapper_factory=mapper_factory,
        log=lambda m: None,
    )


def local_backend(runner: Any, *, batch_size: int = 8, **backend: Any) -> Any:
    """The :class:`~queerbench.models.backends.causal.CausalBackend` of a local runner a test loaded already
    (``batch_size`` rows per forward pass; ``backend``: its options, e.g. ``share_prefixes``), as a probes run's
    backend answers ``loglikelihood`` requests on the weights its ``generate`` requests use."""
    from queerbench.models.backends.causal import CausalBackend
    from queerbench.models.registry import ModelRef

    return CausalBackend(runner, ModelRef(runner.model_id), batch_size=batch_size, **backend)


def option_logps(
    runner: Any, prompts: list[str], options: list[list[str]], prefix: str, *, batch_size: int = 8, **backend: Any
) -> list[list[float]]:
    """Each option's summed log-probability as the reply to its prompt after ``prefix`` (``" " + option``): the
    chat ``loglikelihood`` requests constrained scoring asks, on a local runner's
    :class:`~queerbench.models.backends.causal.CausalBackend` (``backend``: its options, e.g. ``share_prefixes``)."""
    from queerbench.models.requests import Loglikelihood

    scorer = local_backend(runner, batch_size=batch_size, **backend)
    requests = [
        Loglikelihood(p, " " + o, chat=True, reply_prefix=prefix)
        for p, opts in zip(prompts, options, strict=True)
        for o in opts
    ]
    results = iter(scorer.loglikelihood(requests))
    return [[next(results).logprob for _ in opts] for opts in options]
