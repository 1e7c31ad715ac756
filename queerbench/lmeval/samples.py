"""``queerbench lm-eval import OUTPUT_DIR --out RUN_DIR``: lm-evaluation-harness's logged samples → a run folder.

lm-evaluation-harness (``--log_samples --output_path OUTPUT_DIR``) writes, per model, ``results_<time>.json`` and
``samples_<task>_<time>.jsonl`` (one line per sentence: the doc, the reply in ``filtered_resps``). :func:`import_samples`
finds the one run of an exported queerbench task there, checks it (one line for: no samples, samples of other tasks
only, several queerbench tasks without ``task``, samples of two runs or two models, sentences that are not the
task's), parses every reply with queerbench's parser and writes ``predictions.parquet`` (raw replies and labels, in
``queerbench run``'s order), ``model.json`` and ``run.json`` into a new ``RUN_DIR``; then
:func:`queerbench.run.pipeline.run_benchmark` scores it as a finished ``instructed`` run (``scores.json`` with CIs, report,
figures), so ``queerbench compare`` reads it like any run. Nothing is left in ``RUN_DIR`` when a step fails.

The import needs no model: the replies are in the samples file, and what the run records of the model comes from
lm_eval's results file (the name in ``--model_args``, the Hub commit lm_eval recorded as ``model_sha``); a model folder
that exists here is hashed as a run would hash it, and a fingerprint that cannot be had without the Hub is recorded
as unknown. Nothing is downloaded, so an import works offline and on another machine than the lm_eval run.
The sentences it covers are recorded exactly: the first N templates as ``--limit N``, any other part
(``lm_eval --limit 100`` ends inside the second template; a run of later templates) as a subset
(:func:`queerbench.run.signature.sentence_subset`) that the signature, the report and ``compare`` show.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from queerbench.base.files import read_json_object
from queerbench.lmeval.export import export_configs, task_name
from queerbench.lmeval.task import PROMPT_FORMATS
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = ["find_run", "import_samples"]

_RERUN = "rerun lm_eval with --log_samples --output_path into an empty folder and import that"
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<time>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d+)\.jsonl$")
_API_MODELS = ("local-completions", "local-chat-completions", "openai-completions", "openai-chat-completions")


def ours() -> dict[str, tuple[str, str]]:
    """The lm-evaluation-harness task names of queerbench's fill-in-the-blank exports (those ``import`` reads):
    ``{name: (task, prompt format)}``."""
    return {task_name(c, f): (c, f) for c in export_configs(runs_requests=False) for f in PROMPT_FORMATS}


def _obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (a field lm_eval did not write as this reader expects)."""
    return value if isinstance(value, dict) else {}


def _model_args(config: dict[str, Any]) -> dict[str, Any]:
    args = config.get("model_args") or {}
    if isinstance(args, str):  # older releases store the command-line string
        args = dict(part.split("=", 1) for part in args.split(",") if "=" in part)
    return dict(_obj(args))


def _who(results: dict[str, Any]) -> str:
    config = _obj(results.get("config"))
    return f"{config.get('model')}({json.dumps(_model_args(config), sort_keys=True)})"


def find_run(output_dir: str | Path, task: str | None = None) -> tuple[Path, dict[str, Any], str]:
    """``(samples file, its results JSON, task name)`` of the one queerbench run in ``output_dir`` (one-line errors)."""
    root = Path(output_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder: pass the --output_path folder of an lm_eval run")
    found = [(p, m) for p in sorted(root.rglob("samples_*.jsonl")) if (m := _SAMPLES.match(p.name))]
    if not found:
        raise FileNotFoundError(
            f"{root} holds no lm-evaluation-harness samples (samples_<task>_<time>.jsonl): run lm_eval with "
            f"--log_samples --output_path {root}"
        )
    tasks = sorted({m["task"] for _, m in found})
    found_ours = [t for t in tasks if t in ours()]
    scored_there = [t for t in tasks if t in {task_name(c, "raw") for c in export_configs(runs_requests=True)}]
    if not found_ours and scored_there:
        raise ValueError(
            f"the samples in {root} are of {', '.join(scored_there)}, whose scores lm_eval computed itself (its "
            "results_*.json); `lm-eval import` reads the samples of the fill-in-the-blank tasks only"
        )
    if not found_ours:
        raise ValueError(
            f"the samples in {root} are of {', '.join(tasks)}, not of a queerbench task ({', '.join(ours())}): "
            "export the tasks with `queerbench lm-eval export DIR` and run lm_eval with --include_path DIR"
        )
    if task is None and len(found_ours) > 1:
        raise ValueError(f"{root} holds samples of {', '.join(found_ours)}: choose one with --task")
    task = task or found_ours[0]
    if task not in found_ours:
        raise ValueError(f"{root} holds no samples of {task} (it has {', '.join(found_ours)}); choose one with --task")
    runs = [(p, m) for p, m in found if m["task"] == task]
    results = []
    for path, m in runs:
        result_file = path.parent / f"results_{m['time']}.json"
        if not result_file.is_file():
            raise FileNotFoundError(
                f"{path} has no {result_file.name} next to it (lm_eval writes both): it cannot say which model replied"
            )
        results.append(read_json_object(result_file, fix=_RERUN))
    if len(runs) > 1:
        models = sorted({_who(r) for r in results})
        what = f"two models ({'; '.join(models)})" if len(models) > 1 else f"{len(runs)} runs of one model"
        raise ValueError(
            f"{root} holds samples of {task} from {what} ({', '.join(str(p.relative_to(root)) for p, _ in runs)}); "
            "importing them together would mix them: pass the folder (or a copy) with one run only"
        )
    return runs[0][0], results[0], task


def _identity(results: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """``(model for the run options, endpoint or None, fingerprint)`` from lm-evaluation-harness's results JSON (the
    fingerprint of ``model.json``: what lm_eval recorded of the model)."""
    config = _obj(results.get("config"))
    kind, args = str(config.get("model")), _model_args(config)
    endpoint = None
    if kind in _API_MODELS and args.get("model"):
        model = str(args["model"])
        base = str(args.get("base_url") or "")
        endpoint = re.sub(r"/(chat/)?completions/?$", "", base) or None
    elif args.get("pretrained"):
        model = str(args["pretrained"])
        if args.get("gguf_file"):
            model = str(Path(model) / str(args["gguf_file"]))
    else:
        model = str(results.get("model_name") or kind)
    fingerprint = {
        "kind": "lm-eval",
        "lm_eval_model": kind,
        "model_args": args,
        "model_sha": config.get("model_sha") or None,
        "model_revision": config.get("model_revision"),
        "model_dtype": config.get("model_dtype"),
    }
    return model, endpoint, fingerprint


def _run_fingerprint(results: dict[str, Any], model: str, endpoint: str | None) -> dict[str, Any]:
    """The model's fingerprint for ``run.json``, without loading or downloading anything: an endpoint's URL and
    model name; the Hub commit lm_eval recorded (``model_sha``); a model folder or file that exists here, hashed as
    ``queerbench run`` hashes it; else ``{"kind": "id", "sha256": None}``: the weights are unknown (a Hub id lm_eval
    recorded no commit for, a folder of the machine lm_eval ran on)."""
    from queerbench.models.fingerprint import fingerprint_model

    if endpoint:
        return fingerprint_model(model, endpoint=endpoint)
    sha = str(_obj(results.get("config")).get("model_sha") or "")
    if re.fullmatch(r"[0-9a-f]{40}", sha):
        return {"kind": "hub", "commit_hash": sha}
    if Path(model).expanduser().exists():
        try:
            return fingerprint_model(model)
        except ValueError:  # a folder holding no model file: its weights are unknown
            pass
    return {"kind": "id", "model": model, "sha256": None}


def _read_samples(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, sample)`` of every non-empty line of a samples file; a line that is not a JSON object is one
    line naming the file and the line."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                sample = json.loads(line)
            except ValueError as exc:
                said = " ".join(str(exc).split())[:100]
                raise ValueError(f"{path} line {number} is not JSON ({said}); {_RERUN}") from None
            if not isinstance(sample, dict):
                raise ValueError(f"{path} line {number} must hold a JSON object (one sample); {_RERUN}")
            yield number, sample


def import_samples(
    output_dir: str | Path,
    out: str | Path,
    *,
    task: str | None = None,
    toxicity: str | None = None,
    log: Callable[[str], None] = print,
) -> Any:
    """Import the one queerbench run in ``output_dir`` into the new run folder ``out``; returns the
    :class:`~queerbench.run.pipeline.RunResult` of scoring it (``toxicity`` None: the scorer the task was exported with)."""
    from queerbench.base.files import atomic_path, write_json
    from queerbench.methods.instructed.replies import load_prompts, parse_reply
    from queerbench.run.folder import KEY_FILE
    from queerbench.run.pipeline import RunOptions, run_benchmark
    from queerbench.run.signature import sentence_subset, signature_of
    from queerbench.tasks import get_task

    samples_path, results, task = find_run(output_dir, task)
    config, prompt_format = ours()[task]
    meta = _obj(_obj(_obj(results.get("configs")).get(task)).get("metadata"))
    if meta.get("config") != config or "prompt_id" not in meta:
        raise ValueError(
            f"{samples_path} is of a task named {task} that `queerbench lm-eval export` did not write (its metadata "
            "lacks queerbench's config and prompt): export the tasks again and rerun lm_eval"
        )
    chat = bool(results.get("chat_template"))
    if chat != (prompt_format == "chat"):
        fix = "without --apply_chat_template" if chat else "with --apply_chat_template"
        raise ValueError(
            f"{task} was run {'with' if chat else 'without'} --apply_chat_template: its prompt format is "
            f"{prompt_format}; rerun lm_eval {fix}, or use task {task_name(config, 'chat' if chat else 'raw')}"
        )
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"--out {out} exists and is not empty; choose a new folder for the imported run")

    frame = get_task(config).items().drop(columns=["split"])
    by_id = frame.set_index("id")["masked_sentence"].to_dict()
    replies: dict[str, str] = {}
    for number, sample in _read_samples(samples_path):
        doc = _obj(sample.get("doc"))
        sid = doc.get("id")
        if not isinstance(sid, str) or by_id.get(sid) != doc.get("masked_sentence"):
            raise ValueError(
                f"{samples_path} line {number}: sentence {sid!r} is not one of the {config} sentences of this "
                "queerbench version; export the tasks again and rerun lm_eval"
            )
        if sid in replies:
            raise ValueError(f"{samples_path} holds sentence {sid} twice; pass the output of one lm_eval run")
        resps = sample.get("filtered_resps")
        reply = resps[0] if isinstance(resps, list) and resps else ""
        replies[sid] = reply if isinstance(reply, str) else ""
    if not replies:
        raise ValueError(f"{samples_path} holds no samples; rerun lm_eval with --log_samples")

    model, endpoint, fingerprint = _identity(results)
    run_fingerprint = _run_fingerprint(results, model, endpoint)
    limit, sentences = sentence_subset(frame, replies)
    gen = _obj(_obj(_obj(results.get("configs")).get(task)).get("generation_kwargs"))
    max_new = int(gen.get("max_gen_toks") or load_prompts()["decoding"]["max_new_tokens"])
    predictions = frame[frame["id"].isin(replies)].reset_index(drop=True)
    options = RunOptions(
        model=model,
        endpoint=endpoint,
        config=config,
        top_k=1,
        method="instructed",
        limit=limit,
        sentences=sentences,
        method_settings={"prompt_id": str(meta["prompt_id"]), "max_new_tokens": max_new},
        toxicity=toxicity or str(meta.get(TOXICITY) or "embedded"),
    )
    parsed = [
        parse_reply(replies[sid], s) for sid, s in zip(predictions["id"], predictions["masked_sentence"], strict=True)
    ]
    predictions["method"] = "instructed"
    predictions["tokens"] = [[p.word] if p.label == "ok" and p.word else [] for p in parsed]
    predictions["reply"] = [[replies[sid]] for sid in predictions["id"]]
    predictions["label"] = [[p.label] for p in parsed]
    predictions["n_distinct"] = [len(t) for t in predictions["tokens"]]
    predictions["reasks"] = 0
    predictions["prompt_format"] = prompt_format
    predictions["top1"] = [t[0] if t else None for t in predictions["tokens"]]
    predictions["completed"] = [
        [s.replace("[MASK]", w) for w in t]
        for s, t in zip(predictions["masked_sentence"], predictions["tokens"], strict=True)
    ]
    prompt = load_prompts()["prompts"][options.setting("prompt_id")]["text"]
    model_meta = {
        "method": "instructed",
        "model": model,
        "endpoint": endpoint,
        "fingerprint": fingerprint,
        "runner": {"kind": "lm-evaluation-harness", "task": task, "lm_eval_version": results.get("lm_eval_version")},
        "prompt_format": prompt_format,
        "prompt_id": options.setting("prompt_id"),
        "prompt": prompt,
        "system_prompt": results.get("system_instruction"),
        "decoding": {"temperature": 0.0, "max_new_tokens": max_new, "samples": 1, "kind": "greedy", "source": task},
        "imported_from": str(samples_path.resolve()),
        "device": _obj(results.get("config")).get("device"),
    }
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "predictions.parquet") as tmp:
            predictions.to_parquet(tmp, index=False)
        write_json(out / "model.json", model_meta)
        n_templates = int(frame["template_id"].nunique())
        signature = signature_of(options, n_templates=n_templates, fingerprint=run_fingerprint)
        record = {**signature.key(), "model_fingerprint": run_fingerprint}
        write_json(out / KEY_FILE, {**record, "signature": str(signature)})
        log(f"imported {len(predictions)} replies of {task} ({model}) from {samples_path}")
        return run_benchmark(options, out, log=lambda _: None, model_fingerprint=run_fingerprint)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:  # it was empty: empty it again
            for item in out.iterdir():
                shutil.rmtree(item) if item.is_dir() else item.unlink()
        raise
