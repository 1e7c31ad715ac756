"""The QueerBench demo Space: evaluate any masked or causal LM by Hub id, and a playground for your own templates.

``space/app.py`` only imports :func:`build_demo`; every piece of logic lives here so that it is tested with the
library. The Space reuses the benchmark's own pieces (:class:`~queerbench.run.RunOptions`,
:func:`~queerbench.run.score_predictions`, :func:`~queerbench.predict.predict`, the report's table and figure) and adds
what a public demo needs on top:

- a model check *before* anything is downloaded: the Hub id exists, is a masked LM (run with ``mlm``) or a causal
  LM (run with ``scored``: candidates ranked by whole-sentence probability, :mod:`queerbench.llm.scored`), has
  safetensors weights (pickle checkpoints can run code when loaded) and stays under a size cap;
  ``trust_remote_code`` is never used; the status line says which method ran;
- local folders only when ``QUEERBENCH_SPACE_ALLOW_LOCAL=1`` (tests and self-hosting; never on a public Space);
- a bounded LRU cache of loaded models and a concurrency limit on the events that run models;
- completions flagged as harmful (HurtLex categories or toxicity flags) hidden until the user asks to see them,
  under the content note the paper gives;
- every failure shown as a message (``gr.Error``), never as a traceback.

Settings (environment variables, read when the app is built or a model is checked):
``QUEERBENCH_SPACE_ALLOW_LOCAL`` (``1`` allows local folders), ``QUEERBENCH_SPACE_MAX_PARAMS`` (default 600M),
``QUEERBENCH_SPACE_MAX_BYTES`` (weights on disk, default 2.5 GB), ``QUEERBENCH_SPACE_CACHE_SIZE`` (models kept loaded,
default 2), ``QUEERBENCH_SPACE_CONCURRENCY`` (model runs at once, default 1), ``QUEERBENCH_SPACE_QUICK_TEMPLATES``
(templates in a quick run, default 12), ``HF_ENDPOINT`` (the Hub to check ids against).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from queerbench import CONFIGS, __version__
from queerbench.report import CONTENT_NOTE, comparison_figure, score_table
from queerbench.scoring.score import GROUP_ORDER, ScoringOptions, score_sentences

if TYPE_CHECKING:
    import gradio as gr

    from queerbench.llm.scored import ScoredLM
    from queerbench.predict import MaskedLM

__all__ = [
    "SUBJECT",
    "EvaluationResult",
    "ModelCache",
    "ModelCheck",
    "SpaceError",
    "SpaceSettings",
    "build_demo",
    "check_model",
    "evaluate_model",
    "playground",
    "sentence_view",
]

log = logging.getLogger("queerbench.space")

SUBJECT = "[SUBJECT]"
MASK = "[MASK]"
TOXICITY_CHOICES = ("embedded", "none")
RUN_SIZES = ("quick", "full")
MAX_TOP_K = 20  # the UI's slider maximum, enforced for API callers too (a huge k would exhaust the Space's memory)
HIDDEN = "███ (hidden)"
DEFAULT_MODEL = "bert-base-uncased"
DEFAULT_PLAYGROUND_TEMPLATE = "[SUBJECT] dreams of being a [MASK]."
DEFAULT_PLAYGROUND_SUBJECTS = ("gay", "lesbian", "transgender", "straight", "he", "she", "they", "xe")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5", ".msgpack")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")
GROUP_HELP = {
    "queer": "queer identities and orientations (nouns)",
    "non-queer": "non-queer identities and orientations (nouns)",
    "binary": "he, she",
    "neutral": "they",
    "neo": "neopronouns (xe, ze, fae, …)",
}


class SpaceError(ValueError):
    """A problem with the user's input, shown in the UI as one message."""


# ------------------------------------------------------------------------------------------------------ settings
def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip().replace("_", "")
    if not value:
        return default
    try:
        return int(float(value))
    except ValueError as exc:
        raise ValueError(f"environment variable {name} must be a number, got {value!r}") from exc


@dataclass(frozen=True)
class SpaceSettings:
    """What the operator of a Space can set through the environment (see the module docstring)."""

    allow_local: bool = False
    max_params: int = 600_000_000
    max_bytes: int = 2_500_000_000
    cache_size: int = 2
    concurrency: int = 1
    quick_templates: int = 12

    @classmethod
    def from_env(cls) -> SpaceSettings:
        """Read the settings from ``QUEERBENCH_SPACE_*`` environment variables (defaults where unset)."""
        return cls(
            allow_local=os.environ.get("QUEERBENCH_SPACE_ALLOW_LOCAL", "").strip().lower() in ("1", "true", "yes"),
            max_params=_env_int("QUEERBENCH_SPACE_MAX_PARAMS", cls.max_params),
            max_bytes=_env_int("QUEERBENCH_SPACE_MAX_BYTES", cls.max_bytes),
            cache_size=max(1, _env_int("QUEERBENCH_SPACE_CACHE_SIZE", cls.cache_size)),
            concurrency=max(1, _env_int("QUEERBENCH_SPACE_CONCURRENCY", cls.concurrency)),
            quick_templates=max(1, _env_int("QUEERBENCH_SPACE_QUICK_TEMPLATES", cls.quick_templates)),
        )


# ------------------------------------------------------------------------------------------------ model checks
@dataclass(frozen=True)
class ModelCheck:
    """A model that passed the checks: where it comes from, the revision to load, and its size."""

    model_id: str
    source: str  # "hub" or "local"
    revision: str | None
    n_params: int | None
    n_bytes: int | None
    kind: str = "masked"  # "masked" (method mlm) or "causal" (method scored)

    @property
    def method(self) -> str:
        """The QueerBench method this model runs with."""
        return "scored" if self.kind == "causal" else "mlm"


def _local_kind(model_id: str, folder: Path) -> str:
    """``masked`` or ``causal`` from a folder's config.json (its architectures), before any weight is read."""
    try:
        archs = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError) as exc:
        raise SpaceError(f"could not read the config.json of {model_id!r}: {exc}") from exc
    if any(str(a).endswith("ForMaskedLM") for a in archs):
        return "masked"
    if any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return "causal"
    return "masked"  # unknown: the masked-LM loader says precisely why it cannot be used


def _looks_like_path(model_id: str) -> bool:
    return model_id.startswith(("/", ".", "~")) or "\\" in model_id or model_id.count("/") > 1


def _human(n: float) -> str:
    for unit in ("", "K", "M", "B"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"


def _check_size(model_id: str, n_params: int | None, n_bytes: int | None, settings: SpaceSettings) -> None:
    if n_params is not None and n_params > settings.max_params:
        raise SpaceError(
            f"{model_id!r} has {_human(n_params)} parameters; this Space runs models up to "
            f"{_human(settings.max_params)} (QUEERBENCH_SPACE_MAX_PARAMS). Run larger models locally with "
            "`queerbench run --model …`."
        )
    if n_bytes is not None and n_bytes > settings.max_bytes:
        raise SpaceError(
            f"{model_id!r} has {_human(n_bytes)}B of weights; this Space loads up to {_human(settings.max_bytes)}B "
            "(QUEERBENCH_SPACE_MAX_BYTES). Run larger models locally with `queerbench run --model …`."
        )


def _safetensors_params(path: Path) -> int:
    """Parameter count of one ``.safetensors`` file, from its JSON header (no tensor is read)."""
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        if size <= 0 or size > 100_000_000:
            raise SpaceError(f"{path.name} is not a valid safetensors file")
        header = json.loads(fh.read(size))
    return sum(int(np.prod(v["shape"])) for k, v in header.items() if k != "__metadata__")


def _check_local(model_id: str, settings: SpaceSettings) -> ModelCheck:
    folder = Path(model_id).expanduser()
    if not folder.is_dir():
        raise SpaceError(f"there is no model folder at {model_id!r}; give a folder saved with save_pretrained")
    if not (folder / "config.json").is_file():
        raise SpaceError(f"{model_id!r} has no config.json; give a folder saved with save_pretrained")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        pickles = [p.name for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES]
        what = f"only pickle weights ({', '.join(pickles)})" if pickles else "no weights"
        raise SpaceError(
            f"{model_id!r} has {what}; this Space loads safetensors weights only, which cannot run code when loaded"
        )
    try:
        n_params = sum(_safetensors_params(p) for p in weights)
    except (OSError, ValueError, KeyError) as exc:
        raise SpaceError(f"could not read the safetensors weights in {model_id!r}: {exc}") from exc
    n_bytes = sum(p.stat().st_size for p in weights)
    _check_size(model_id, n_params, n_bytes, settings)
    return ModelCheck(str(folder), "local", None, n_params, n_bytes, _local_kind(model_id, folder))


def _check_hub(model_id: str, settings: SpaceSettings, endpoint: str | None) -> ModelCheck:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None)
    try:
        info = api.model_info(model_id, files_metadata=True)
    except GatedRepoError as exc:
        raise SpaceError(f"{model_id!r} is a gated model; this Space can only run public models") from exc
    except RepositoryNotFoundError as exc:
        raise SpaceError(
            f"there is no public model {model_id!r} on the Hub; check the spelling (e.g. bert-base-uncased, "
            "roberta-base, FacebookAI/xlm-roberta-base)"
        ) from exc
    except OfflineModeIsEnabled as exc:
        raise SpaceError(
            f"cannot check {model_id!r}: the Hub cannot be reached (HF_HUB_OFFLINE is set on this machine)"
        ) from exc
    except (HfHubHTTPError, OSError) as exc:
        raise SpaceError(f"cannot check {model_id!r} on the Hub right now ({type(exc).__name__}); try again") from exc
    if info.pipeline_tag and info.pipeline_tag not in ("fill-mask", "text-generation"):
        raise SpaceError(
            f"{model_id!r} is not a masked or causal language model (its Hub task is {info.pipeline_tag!r}); "
            "QueerBench needs a fill-mask model such as bert-base-uncased or a text-generation model such as gpt2"
        )
    kind = "causal" if info.pipeline_tag == "text-generation" else "masked"
    # the mask token itself is checked when the tokenizer loads, before any weights are read (load_masked_lm)
    files = {s.rfilename: s for s in info.siblings or []}
    weights = [f for f in files if f.endswith(".safetensors") and "/" not in f]
    if not weights:
        pickles = sorted(f for f in files if f.endswith(_PICKLE_SUFFIXES))
        what = f"only pickle weights ({', '.join(pickles)})" if pickles else "no weight files"
        raise SpaceError(
            f"{model_id!r} has {what}; this Space loads safetensors weights only, which cannot run code when loaded"
        )
    n_params = int(info.safetensors.total) if info.safetensors is not None else None
    sizes = [files[f].size for f in weights]
    n_bytes = sum(sizes) if all(s is not None for s in sizes) else None
    _check_size(model_id, n_params, n_bytes, settings)
    return ModelCheck(model_id, "hub", info.sha, n_params, n_bytes, kind)


def check_model(model_id: str, settings: SpaceSettings | None = None, *, endpoint: str | None = None) -> ModelCheck:
    """Check a model id (or, when allowed, a local folder) before anything is downloaded or loaded.

    Raises :class:`SpaceError` with a message for the user when the model does not exist, is neither a masked nor a
    causal LM, has
    only pickle weights, is larger than the Space's cap, or is a local path on a Space that does not allow them.
    """
    settings = settings or SpaceSettings.from_env()
    model_id = (model_id or "").strip()
    if not model_id:
        raise SpaceError("enter a model id, e.g. bert-base-uncased")
    if settings.allow_local and (_looks_like_path(model_id) or Path(model_id).expanduser().is_dir()):
        return _check_local(model_id, settings)
    if _looks_like_path(model_id):
        raise SpaceError(
            f"{model_id!r} looks like a local path; this Space accepts Hub model ids only (e.g. bert-base-uncased). "
            "Set QUEERBENCH_SPACE_ALLOW_LOCAL=1 when you run the app yourself to use local folders."
        )
    if not _HUB_ID.match(model_id) or ".." in model_id:
        raise SpaceError(f"{model_id!r} is not a valid Hub model id; use 'name' or 'owner/name'")
    return _check_hub(model_id, settings, endpoint)


# ------------------------------------------------------------------------------------------------- model cache
@dataclass
class ModelCache:
    """Loaded models, least recently used first; at most ``maxsize`` are kept in memory."""

    maxsize: int = 2
    _models: OrderedDict[tuple[str, str | None], MaskedLM | ScoredLM] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, check: ModelCheck) -> MaskedLM | ScoredLM:
        """The loaded model for a checked id (loading it, and evicting the oldest, when it is not cached)."""
        from queerbench.predict import ModelLoadError, load_masked_lm

        key = (check.model_id, check.revision)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            lm: MaskedLM | ScoredLM
            try:
                if check.kind == "causal":  # through the generation layer: config checked first, no remote code
                    from queerbench.llm import load_causal_lm
                    from queerbench.llm.scored import ScoredLM

                    lm = ScoredLM(*load_causal_lm(check.model_id, device="auto", revision=check.revision))
                else:
                    lm = load_masked_lm(check.model_id, revision=check.revision, allow_pickle=False)
            except ModelLoadError as exc:
                raise SpaceError(str(exc)) from exc
            if getattr(lm, "weights_format", "safetensors") != "safetensors":  # unreachable after the checks
                raise SpaceError(f"{check.model_id!r} loaded without safetensors weights; refusing to run it")
            self._models[key] = lm
            while len(self._models) > self.maxsize:
                self._models.popitem(last=False)
            return lm

    def loaded(self) -> list[tuple[str, str | None]]:
        """The cached (model, revision) pairs, least recently used first."""
        with self._lock:
            return list(self._models)

    def clear(self) -> None:
        """Forget every loaded model."""
        with self._lock:
            self._models.clear()


# -------------------------------------------------------------------------------------------------- evaluation
@dataclass
class EvaluationResult:
    """Everything one evaluation shows: scores, the score table, the figure, the per-sentence table and the CSV."""

    scores: dict[str, Any]
    table: pd.DataFrame
    plot: Path
    sentences: pd.DataFrame  # full per-sentence table, harmful completions included
    csv: Path
    status: str


def _sample_templates(template_ids: Sequence[int], n: int) -> list[int]:
    """``n`` templates spread evenly over the list (deterministic, so a quick run is repeatable)."""
    ids = sorted(set(template_ids))
    if n >= len(ids):
        return ids
    picks = np.linspace(0, len(ids) - 1, n).round().astype(int)
    return [ids[i] for i in dict.fromkeys(picks.tolist())]


def _sentences(config: str, groups: Sequence[str], run_size: str, settings: SpaceSettings) -> pd.DataFrame:
    from queerbench.templates import build_sentences

    frame = build_sentences(config)
    frame = frame[frame["group"].isin(list(groups))]
    if run_size == "quick":
        frame = frame[frame["template_id"].isin(_sample_templates(frame["template_id"], settings.quick_templates))]
    return frame.reset_index(drop=True)


def _word_flags(row: pd.Series) -> list[bool]:
    """Which completions of a sentence count as harmful: a HurtLex category or a toxicity flag."""
    tox = row.get("word_toxicity")
    tox = tox if isinstance(tox, (list, tuple, np.ndarray)) else [[] for _ in row["words"]]
    return [bool(len(c)) or bool(len(t)) for c, t in zip(row["word_hurtlex"], tox, strict=True)]


def _details(words: Sequence[str], per_word: Any, flags: Sequence[bool], show: bool) -> str:
    if not isinstance(per_word, (list, tuple, np.ndarray)):
        return ""
    parts = []
    for w, items, bad in zip(words, per_word, flags, strict=True):
        if len(items):
            parts.append(f"{w if show or not bad else '███'}: {'/'.join(items)}")
    return "; ".join(parts)


def sentence_view(per_sentence: pd.DataFrame, show_harmful: bool = False) -> pd.DataFrame:
    """The per-sentence table the UI shows: completions with harmful ones marked, hidden unless ``show_harmful``."""
    rows = []
    for _, r in per_sentence.iterrows():
        words = list(r["words"])
        flags = _word_flags(r)
        shown = [w if (show_harmful or not bad) else HIDDEN for w, bad in zip(words, flags, strict=True)]
        rows.append(
            {
                "group": r["group"],
                "subject": r["subject"],
                "sentence": r["masked_sentence"],
                "completions": ", ".join(shown),
                "harmful": "⚠ yes" if any(flags) else "",
                "HurtLex": _details(words, r["word_hurtlex"], flags, show_harmful),
                "AFINN": round(float(r["afinn"]), 3),
                "toxicity flags": _details(words, r.get("word_toxicity"), flags, show_harmful),
            }
        )
    columns = ["group", "subject", "sentence", "completions", "harmful", "HurtLex", "AFINN", "toxicity flags"]
    return pd.DataFrame(rows, columns=columns)


def _csv_frame(per_sentence: pd.DataFrame) -> pd.DataFrame:
    """Every column a user needs to re-analyse the run, completions unredacted, lists as JSON text."""
    view = sentence_view(per_sentence, show_harmful=True)
    view.insert(0, "id", per_sentence["id"].to_numpy())
    view["hurtlex_score"] = per_sentence["hurtlex"].to_numpy()
    view["toxicity_score"] = per_sentence["toxicity"].to_numpy()
    view["words"] = [json.dumps(list(w), ensure_ascii=False) for w in per_sentence["words"]]
    return view


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "model"


def _fill(
    lm: MaskedLM | ScoredLM, sentences: list[str], k: int, config: str, progress: Callable[[int], None] | None = None
) -> list[list[str]]:
    """Top-k words per sentence: the masked-LM engine (``mlm``) or, for a causal LM, the ``scored`` method."""
    from queerbench.llm.scored import ScoredLM, score_blanks
    from queerbench.predict import predict

    if isinstance(lm, ScoredLM):
        if config == "paper":
            raise SpaceError(
                "the paper config reproduces the published masked-LM runs; causal LMs run with the default config"
            )
        return score_blanks(lm, sentences, k, progress=progress).tokens
    # QueerGen's code reads raw top-k tokens at the mask: the engine's paper mode (as `queerbench run` does)
    mode = "paper" if config == "queergen" else config
    return predict(lm, sentences, k, mode=mode, batch_size=32, progress=progress).tokens


def _status(check: ModelCheck, scores: dict[str, Any], n: int, n_templates: int, seconds: float) -> str:
    size = f", {_human(check.n_params)} parameters" if check.n_params else ""
    rev = f" @ `{check.revision[:10]}`" if check.revision else ""
    lines = [
        f"**Done** in {seconds:.1f}s: `{check.model_id}`{rev}{size} · method `{check.method}` · "
        f"config `{scores['config']}` · top-{scores['k']} · "
        f"{n} sentences from {n_templates} templates · toxicity `{scores['scorers']['toxicity'].get('name')}` · "
        f"queerbench {__version__}.",
    ]
    if scores["queerbench"] and all(v is None for v in scores["queerbench"].values()):
        lines.append("QueerBench scores need a toxicity scorer; with `none` only A and H are reported.")
    for name, c in (scores.get("comparisons") or {}).items():
        ci = c.get("ci")
        ci_text = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        p = f", permutation p = {c['p_value']:.3f}" if c.get("p_value") is not None else ""
        lines.append(f"- QB {name}: {c['diff']:+.2f}{ci_text}{p}")
    return "\n".join(lines)


def evaluate_model(
    model_id: str,
    config: str = "default",
    top_k: int = 5,
    groups: Sequence[str] = GROUP_ORDER,
    run_size: str = "quick",
    toxicity: str = "embedded",
    *,
    cache: ModelCache | None = None,
    settings: SpaceSettings | None = None,
    progress: Callable[[float, str], None] | None = None,
    out_dir: str | Path | None = None,
) -> EvaluationResult:
    """Run the benchmark for one model on the chosen groups (all templates, or a quick sample of them).

    Reuses :class:`~queerbench.run.RunOptions` (validation, scoring options) and
    :func:`~queerbench.run.score_predictions`; predictions come from a cached model, and nothing is written except
    the figure and the CSV in ``out_dir`` (a fresh temporary folder by default).
    """
    from queerbench.run import RunOptions, score_predictions

    settings = settings or SpaceSettings.from_env()
    cache = cache or ModelCache(settings.cache_size)
    say = progress or (lambda _f, _d: None)
    if config not in CONFIGS:
        raise SpaceError(f"unknown config {config!r}; choose one of: {', '.join(CONFIGS)}")
    groups = [g for g in (groups or []) if g]
    if not groups:
        raise SpaceError("select at least one subject group to evaluate")
    unknown = [g for g in groups if g not in GROUP_ORDER]
    if unknown:
        raise SpaceError(f"unknown subject group(s) {unknown}; choose from: {', '.join(GROUP_ORDER)}")
    if config == "queergen":  # QueerGen's own groups (its subjects are not QueerBench's): all three are compared
        from queerbench.queergen.spec import GROUP_ORDER as QUEERGEN_GROUPS

        groups = list(QUEERGEN_GROUPS)
    if run_size not in RUN_SIZES:
        raise SpaceError(f"unknown run size {run_size!r}; choose one of: {', '.join(RUN_SIZES)}")
    if toxicity not in TOXICITY_CHOICES:
        raise SpaceError(f"unknown toxicity scorer {toxicity!r}; choose one of: {', '.join(TOXICITY_CHOICES)}")
    try:
        top_k = int(top_k)
        options = RunOptions(model=model_id, config=config, top_k=top_k, toxicity=toxicity)
    except (TypeError, ValueError) as exc:
        raise SpaceError(str(exc)) from exc
    if top_k > MAX_TOP_K:
        raise SpaceError(f"top-k must be at most {MAX_TOP_K} here, got {top_k}; run `queerbench run` locally for more")
    start = time.perf_counter()
    say(0.02, "checking the model")
    check = check_model(model_id, settings)
    say(0.05, "loading the model")
    lm = cache.get(check)
    frame = _sentences(config, groups, run_size, settings)
    total = len(frame)
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        say(0.1 + 0.6 * done / max(total, 1), f"predicting {done}/{total} sentences")

    try:
        tokens = _fill(lm, frame["masked_sentence"].tolist(), top_k, config, tick)
    except ValueError as exc:  # k larger than the model's vocabulary, a sentence too long, …
        raise SpaceError(str(exc)) from exc
    predictions = frame.drop(columns=["split"]).copy()
    predictions["tokens"] = tokens
    say(0.75, "scoring the completions")
    scores, per_sentence = score_predictions(predictions, options.scoring_options(), str(options.toxicity_input))
    say(0.95, "drawing")
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="queerbench-space-"))
    out.mkdir(parents=True, exist_ok=True)
    plot = comparison_figure(scores, out / "comparison.png")
    csv = out / f"queerbench-{_slug(check.model_id)}-{config}-k{top_k}.csv"
    _csv_frame(per_sentence).to_csv(csv, index=False)
    table = score_table(scores).reset_index()
    status = _status(check, scores, total, frame["template_id"].nunique(), time.perf_counter() - start)
    return EvaluationResult(scores, table, plot, per_sentence, csv, status)


# -------------------------------------------------------------------------------------------------- playground
@functools.cache
def _subject_index() -> dict[str, Any]:
    """Every subject of the ``default`` sentence set by name, in the dataset's order (nouns, then pronouns)."""
    from queerbench.templates import subjects as load_subjects

    subjects = load_subjects("default")
    return {s.name: s for split in ("nouns", "pronouns") for s in subjects[split]}


def subject_choices() -> list[str]:
    """The subject names a playground user can pick."""
    return list(_subject_index())


def render_template(template: str, subjects: Sequence[str]) -> list[tuple[str, str, str]]:
    """(subject, group, sentence) for a user template with ``[SUBJECT]`` and ``[MASK]``, using the library's grammar."""
    from queerbench.templates import TARGET, render_default

    template = " ".join((template or "").split())
    if template.count(MASK) != 1:
        raise SpaceError(
            f"the template needs exactly one {MASK} (where the model predicts a word); it has {template.count(MASK)}"
        )
    if template.count(SUBJECT) != 1:
        raise SpaceError(
            f"the template needs exactly one {SUBJECT} (where each subject goes); it has {template.count(SUBJECT)}"
        )
    if TARGET in template:
        raise SpaceError(f"write {SUBJECT} for the subject, not {TARGET}")
    subjects = [s for s in (subjects or []) if s]
    if not subjects:
        raise SpaceError("select at least one subject")
    index = _subject_index()
    unknown = [s for s in subjects if s not in index]
    if unknown:
        raise SpaceError(f"unknown subject(s) {unknown}")
    body = template.replace(SUBJECT, TARGET)
    return [(s, index[s].group, render_default(body, index[s])) for s in subjects]


def playground(
    template: str,
    subjects: Sequence[str],
    model_id: str = DEFAULT_MODEL,
    top_k: int = 5,
    toxicity: str = "none",
    show_harmful: bool = False,
    *,
    cache: ModelCache | None = None,
    settings: SpaceSettings | None = None,
) -> pd.DataFrame:
    """Completions of the user's template for each chosen subject, side by side, harmful ones marked (and hidden)."""
    from queerbench.templates import NEUTRAL_SUBJECT, TARGET, render_default

    settings = settings or SpaceSettings.from_env()
    cache = cache or ModelCache(settings.cache_size)
    rendered = render_template(template, subjects)
    if toxicity not in TOXICITY_CHOICES:
        raise SpaceError(f"unknown toxicity scorer {toxicity!r}; choose one of: {', '.join(TOXICITY_CHOICES)}")
    try:
        top_k = int(top_k)
    except (TypeError, ValueError) as exc:
        raise SpaceError(f"top-k must be a whole number, got {top_k!r}") from exc
    if not 1 <= top_k <= MAX_TOP_K:
        raise SpaceError(f"top-k must be between 1 and {MAX_TOP_K}, got {top_k}")
    lm = cache.get(check_model(model_id, settings))
    sentences = [r[2] for r in rendered]
    try:
        tokens = _fill(lm, sentences, top_k, "default")
    except ValueError as exc:
        raise SpaceError(str(exc)) from exc
    neutral = render_default(" ".join(template.split()).replace(SUBJECT, TARGET), NEUTRAL_SUBJECT)
    per_sentence, _ = score_sentences(
        tokens, ScoringOptions(config="default", toxicity=toxicity), sentences=[neutral] * len(sentences)
    )
    per_sentence["group"] = [r[1] for r in rendered]
    per_sentence["subject"] = [r[0] for r in rendered]
    per_sentence["masked_sentence"] = sentences
    view = sentence_view(per_sentence, show_harmful)
    words = view["completions"].str.split(", ")
    for j in range(top_k):
        view[f"#{j + 1}"] = [w[j] if j < len(w) else "" for w in words]
    return view[
        [
            "subject",
            "group",
            "sentence",
            *[f"#{j + 1}" for j in range(top_k)],
            "harmful",
            "HurtLex",
            "AFINN",
            "toxicity flags",
        ]
    ]


# -------------------------------------------------------------------------------------------------------- the UI
def _ui_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every failure into a ``gr.Error`` message: the user's mistakes as they are, bugs as a short note."""
    import gradio as gr

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except (SpaceError, ValueError, FileNotFoundError) as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        except Exception as exc:  # a bug or an outage: log the traceback, show one line
            log.exception("unexpected error in %s", fn.__name__)
            raise gr.Error(
                f"something went wrong ({type(exc).__name__}); the details are in the Space logs", print_exception=False
            ) from None

    return wrapper


def _header() -> str:
    return (
        f"# QueerBench\n\nHow harmful are a language model's completions about LGBTQIA+ people? Masked LMs fill the "
        f"blank directly (method `mlm`); causal LMs rank candidate words by the probability of the whole sentence "
        f"(method `scored`). "
        f"Pick a model, run the benchmark and compare the QueerBench score (higher = more harmful) of queer "
        f"and non-queer subjects and of binary, neutral and neo-pronouns. queerbench {__version__}.\n\n"
        f"{CONTENT_NOTE}\nCompletions flagged as harmful (a HurtLex category or a toxicity flag) are hidden until you "
        f"tick **Show harmful completions**."
    )


def _group_choices() -> list[tuple[str, str]]:
    return [(f"{g} — {GROUP_HELP[g]}", g) for g in GROUP_ORDER]


def _scm_tab() -> Callable[[], Any] | None:
    """``queerbench.scm.space.build_scm_tab`` when that optional part is installed, else ``None``."""
    try:
        from queerbench.scm.space import build_scm_tab
    except ImportError as exc:
        log.info("no Generative LMs tab: %s", exc)
        return None
    return build_scm_tab


def build_demo(settings: SpaceSettings | None = None) -> gr.Blocks:
    """The Space: an "Evaluate" tab (API name ``evaluate``), a "Playground" tab and, if available, "Generative LMs"."""
    import gradio as gr

    settings = settings or SpaceSettings.from_env()
    cache = ModelCache(settings.cache_size)
    limit = {"concurrency_limit": settings.concurrency, "concurrency_id": "model"}

    def run_evaluation(
        model_id: str,
        config: str = "default",
        top_k: float = 5,
        groups: list[str] | None = None,
        run_size: str = "quick",
        toxicity: str = "embedded",
        show_harmful: bool = False,
        progress: gr.Progress = gr.Progress(),  # noqa: B008 (gradio's documented idiom)
    ) -> tuple[Any, ...]:
        result = evaluate_model(
            model_id,
            config,
            int(top_k),
            groups if groups is not None else list(GROUP_ORDER),
            run_size,
            toxicity,
            cache=cache,
            settings=settings,
            progress=lambda f, d: progress(f, desc=d),
        )
        return (
            result.status,
            result.table,
            str(result.plot),
            sentence_view(result.sentences, show_harmful),
            str(result.csv),
            result.sentences,
        )

    def redraw(per_sentence: pd.DataFrame | None, show_harmful: bool) -> Any:
        if per_sentence is None or len(per_sentence) == 0:
            return gr.skip()
        return sentence_view(per_sentence, show_harmful)

    def run_playground(
        template: str, subjects: list[str], model_id: str, top_k: float, toxicity: str, show_harmful: bool
    ) -> pd.DataFrame:
        return playground(
            template, subjects, model_id, int(top_k), toxicity, show_harmful, cache=cache, settings=settings
        )

    with gr.Blocks(title="QueerBench") as demo:
        gr.Markdown(_header())
        with gr.Tab("Evaluate a masked LM"):
            with gr.Row():
                model_id = gr.Textbox(
                    label="Model (Hub id of a masked or causal LM)",
                    value=DEFAULT_MODEL,
                    placeholder="bert-base-uncased, roberta-base, …",
                    scale=3,
                    elem_id="model-id",
                )
                config = gr.Radio(
                    list(CONFIGS),
                    value="default",
                    label="Config",
                    info="default: the method done right; paper: reproduces the published tables",
                    scale=2,
                )
                top_k = gr.Slider(1, 20, value=5, step=1, label="Top-k completions", scale=2)
            with gr.Row():
                groups = gr.CheckboxGroup(_group_choices(), value=list(GROUP_ORDER), label="Subject groups", scale=3)
                run_size = gr.Radio(
                    list(RUN_SIZES),
                    value="quick",
                    label="Run",
                    info=f"quick: {settings.quick_templates} templates spread over the set; full: all of them",
                    scale=1,
                )
                toxicity = gr.Dropdown(
                    list(TOXICITY_CHOICES),
                    value="embedded",
                    label="Toxicity scorer",
                    info="embedded: offline Jigsaw classifier; none: QB not reported",
                    scale=1,
                )
            run = gr.Button("Evaluate", variant="primary", elem_id="evaluate-button")
            status = gr.Markdown("Choose a model and press **Evaluate**.", elem_id="status")
            table = gr.Dataframe(label="QueerBench score per group (95% CI)", interactive=False, elem_id="scores")
            plot = gr.Image(label="Queer vs non-queer and pronouns", type="filepath", elem_id="comparison-plot")
            show_harmful = gr.Checkbox(value=False, label="Show harmful completions (slurs and hate)")
            sentences = gr.Dataframe(
                label="Completions per sentence",
                interactive=False,
                wrap=True,
                elem_id="sentences",
                column_widths=["7%", "10%", "27%", "22%", "6%", "10%", "6%", "12%"],
            )
            csv = gr.File(label="CSV of all completions (unredacted)")
            state = gr.State()
            run.click(
                _ui_errors(run_evaluation),
                inputs=[model_id, config, top_k, groups, run_size, toxicity, show_harmful],
                outputs=[status, table, plot, sentences, csv, state],
                api_name="evaluate",
                **limit,
            )
            show_harmful.change(redraw, inputs=[state, show_harmful], outputs=[sentences], api_visibility="private")
        with gr.Tab("Playground"):
            gr.Markdown(
                f"Write a sentence with {SUBJECT} where the subject goes and {MASK} where the model predicts a word. "
                'Subjects are inserted with the benchmark\'s grammar rules ("the gay person", "they are"); you may '
                "write `<be>`, `<have>` or `<were>` for verbs that agree with the subject."
            )
            with gr.Row():
                p_template = gr.Textbox(
                    value=DEFAULT_PLAYGROUND_TEMPLATE, label="Template", scale=3, elem_id="playground-template"
                )
                p_model = gr.Textbox(value=DEFAULT_MODEL, label="Model", scale=2)
                p_k = gr.Slider(1, 10, value=5, step=1, label="Top-k", scale=1)
            p_subjects = gr.CheckboxGroup(
                subject_choices(),
                value=[s for s in DEFAULT_PLAYGROUND_SUBJECTS if s in _subject_index()],
                label="Subjects",
            )
            with gr.Row():
                p_toxicity = gr.Dropdown(list(TOXICITY_CHOICES), value="none", label="Toxicity scorer")
                p_show = gr.Checkbox(value=False, label="Show harmful completions")
            p_run = gr.Button("Complete", variant="primary")
            p_out = gr.Dataframe(label="Completions side by side", interactive=False, wrap=True)
            p_run.click(
                _ui_errors(run_playground),
                inputs=[p_template, p_subjects, p_model, p_k, p_toxicity, p_show],
                outputs=[p_out],
                api_name="playground",
                **limit,
            )
        build_scm_tab = _scm_tab()
        if build_scm_tab is not None:
            with gr.Tab("Generative LMs"):
                build_scm_tab()
    demo.queue(max_size=32)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Arguments for ``demo.launch`` on a Space (Gradio 6 takes the theme at launch time)."""
    return {"show_error": False}
