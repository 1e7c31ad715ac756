"""Shared test setup: offline Hugging Face libraries and the pinned external data.

Tests make no outside connections except to fetch pinned external files. Every external file a test reads resolves
like the library's own (:func:`queerbench.base.sources.fetch`): ``$QUEERBENCH_DATA_DIR/<relpath>`` if that exists, else the
user cache, else a download from the pinned URL, checksum-verified. The library's files are pinned in
``lexicons/sources.json``; files only the tests read (the QueerBench paper's stored predictions, evaluations and
result tables) in ``tests/data/reference_files.json``. Offline with no copy, the session stops at once with the
one-line error that names the file and the fix.
"""

from __future__ import annotations

import os
import shutil
import socketserver
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE_MANIFEST = Path(__file__).resolve().parent / "data" / "reference_files.json"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("QUEERBENCH_DATA_DIR"):
    # `QUEERBENCH_DATA_DIR=some/relative/path`: made absolute, since some tests run commands in other folders
    os.environ["QUEERBENCH_DATA_DIR"] = str(Path(os.environ["QUEERBENCH_DATA_DIR"]).resolve())


_PRINT_HANDLER_ERROR = socketserver.BaseServer.handle_error


def _handle_error_unless_hung_up(self: socketserver.BaseServer, request: object, client_address: object) -> None:
    """A test server's handler that finds its client gone says nothing: several tests time the client out or cut the
    connection on purpose, and the handler thread, still sleeping, writes into the closed socket after its test has
    ended, so the stdlib's traceback would land in whichever test the worker runs next (and break that test's
    one-line stderr check). Any other handler error is printed as before."""
    if isinstance(sys.exc_info()[1], ConnectionError):
        return
    _PRINT_HANDLER_ERROR(self, request, client_address)  # type: ignore[arg-type]


socketserver.BaseServer.handle_error = _handle_error_unless_hung_up  # type: ignore[method-assign,assignment]


@pytest.fixture(scope="session", autouse=True)
def tiny_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session builds each tiny model once (:mod:`tests.tiny_models`); every test gets a copy."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("tiny-models")
    tiny_models.use_cache(root)
    return root


def pytest_sessionstart(session: pytest.Session) -> None:
    """One early check that the pinned data can be had at all, so that an offline machine with no data folder gets
    one clear line instead of a failure per test: a data folder that is named must exist, and the smallest pinned
    file must resolve (from the data folder, the cache, or a download that then caches it)."""
    from queerbench.base.sources import DATA_DIR_ENV, ChecksumError, SourceUnavailableError, data_dir, fetch

    root = data_dir()
    if root is not None and not root.is_dir():
        raise pytest.UsageError(
            f"{DATA_DIR_ENV}={root} is not a folder; point it at a data folder laid out as docs/data.md describes, "
            "or unset it to fetch the pinned files"
        )
    try:
        fetch("queerbench_pronouns")
    except (SourceUnavailableError, ChecksumError) as exc:
        raise pytest.UsageError(f"the tests need the pinned external data: {exc}") from None


@cache
def _pinned_by_relpath() -> dict:
    """Every pinned URL file, the library's and the tests' own, by its path below a data folder."""
    from queerbench.base.sources import list_sources, load_manifest

    library = {s.relpath: s for s in list_sources() if s.relpath is not None}
    tests_only = {s.relpath: s for s in load_manifest(REFERENCE_MANIFEST).values()}
    assert not library.keys() & tests_only.keys(), "a file is pinned twice"
    return library | tests_only


@pytest.fixture(scope="session")
def reference_file() -> Callable[[str], Path]:
    """``reference_file(relpath)``: a verified local copy of the pinned file at ``relpath`` (its path below a data
    folder, e.g. ``upstream/queerbench/data/evaluation/bert-base-uncased_template_5.csv``), resolved like every
    external file. A file that cannot be had fails the test with the one-line reason and fix."""
    from queerbench.base.sources import ChecksumError, SourceUnavailableError, fetch

    pinned = _pinned_by_relpath()

    def resolve(relpath: str) -> Path:
        if relpath not in pinned:
            pytest.fail(f"{relpath} is pinned in neither lexicons/sources.json nor {REFERENCE_MANIFEST.name}")
        try:
            return fetch(pinned[relpath])
        except (SourceUnavailableError, ChecksumError) as exc:
            reason = str(exc)
        pytest.fail(reason, pytrace=False)  # outside the `except`: the one line, without the network's traceback

    return resolve


def _pinned_below(folder: str) -> list[str]:
    chosen = sorted(r for r in _pinned_by_relpath() if r.startswith(folder.rstrip("/") + "/"))
    if not chosen:
        pytest.fail(f"no pinned file below {folder}")
    return chosen


@pytest.fixture(scope="session")
def reference_folder(
    reference_file: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """``reference_folder(folder)``: a folder holding exactly the pinned files below ``folder`` (subfolders kept), as
    links to their verified copies, for code that reads a whole folder. Read it, never write to it."""
    tree = tmp_path_factory.mktemp("reference")

    def build(folder: str) -> Path:
        for relpath in _pinned_below(folder):
            link = tree / relpath
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(reference_file(relpath))
        return tree / folder

    return build


@pytest.fixture()
def data_folder(reference_file: Callable[[str], Path], tmp_path: Path) -> Callable[..., Path]:
    """``data_folder(*folders)``: a fresh data folder ``tmp_path/"data"`` with writable copies of the pinned files below
    each of ``folders``, laid out as ``QUEERBENCH_DATA_DIR`` expects, for tests that break one file on purpose."""
    root = tmp_path / "data"

    def build(*folders: str) -> Path:
        for folder in folders:
            for relpath in _pinned_below(folder):
                (root / relpath).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(reference_file(relpath), root / relpath)
        return root

    return build


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Torch on one thread for a module's tests (``pytestmark = pytest.mark.usefixtures("one_thread")``): tiny models
    gain nothing from threads, and on a shared 2-core machine extra threads only spin-wait for each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture()
def stand_in_hub(monkeypatch: pytest.MonkeyPatch):
    """A stand-in Hub: ``serve(hub_id, folder)`` makes transformers' ``from_pretrained`` (config, tokenizer and causal
    LM) load ``hub_id`` from ``folder``, resolved at commit ``c0ffee`` (what the Hub's API answers for its files:
    :func:`queerbench.models.fingerprint.hub_commit`); every other name loads as usual."""
    import transformers

    from queerbench.models import fingerprint

    served: dict[str, Path] = {}
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        real = cls.from_pretrained.__func__

        def from_hub(klass, name, *args, _real=real, **kwargs):
            return _real(klass, served.get(name, name), *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(from_hub))
    real_commit = fingerprint.hub_commit
    monkeypatch.setattr(
        fingerprint,
        "hub_commit",
        lambda name, revision=None: "c0ffee" if name in served else real_commit(name, revision),
    )

    def serve(hub_id: str, folder: Path) -> None:
        served[hub_id] = folder

    return serve


@pytest.fixture()
def hub_commits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Every :func:`queerbench.models.fingerprint.hub_commit` call (name, revision); the Hub answers commit ``c0ffee``
    for ``org/known`` and nothing for any other id (offline, unknown, unreadable)."""
    from queerbench.models import fingerprint

    seen: list[tuple[str, str | None]] = []

    def answer(name: str, revision: str | None = None) -> str | None:
        seen.append((str(name), revision))
        return "c0ffee" if str(name) == "org/known" else None

    monkeypatch.setattr(fingerprint, "hub_commit", answer)
    return seen


@pytest.fixture()
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The task registry found afresh (and again after the test), so that ``QUEERBENCH_TASK_PATH`` counts."""
    from queerbench import tasks as registry

    registry.all_tasks.cache_clear()
    registry._modules.cache_clear()
    yield monkeypatch
    registry.all_tasks.cache_clear()
    registry._modules.cache_clear()


ECHO_TASK = Path(__file__).parent / "data" / "echo_probes"
"""The echo task: a ``probes`` task of its own package (three prompts, one setting), found through
``QUEERBENCH_TASK_PATH``."""


@pytest.fixture()
def echo(fresh_registry: pytest.MonkeyPatch) -> None:
    """The echo task installed (and a test API key for the fake endpoint it is asked through)."""
    fresh_registry.setenv("QUEERBENCH_TASK_PATH", str(ECHO_TASK))
    fresh_registry.setenv("OPENAI_API_KEY", "sk-test")
