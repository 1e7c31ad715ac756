"""Shared test setup: offline Hugging Face libraries and the shared data directory.

Tests make no outside connections. External files come from ``$QUEERBENCH_DATA_DIR`` (CI points it at
``../shared``; when unset we use ``../shared`` next to the repository if it exists).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "QUEERBENCH_DATA_DIR" not in os.environ and (REPO.parent / "shared").is_dir():
    os.environ["QUEERBENCH_DATA_DIR"] = str(REPO.parent / "shared")
elif os.environ.get("QUEERBENCH_DATA_DIR"):
    # the README's `QUEERBENCH_DATA_DIR=../shared`: made absolute, since some tests run commands in other folders
    os.environ["QUEERBENCH_DATA_DIR"] = str(Path(os.environ["QUEERBENCH_DATA_DIR"]).resolve())


@pytest.fixture(scope="session", autouse=True)
def tiny_model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session builds each tiny model once (:mod:`tests.tiny_models`); every test gets a copy."""
    from tests import tiny_models

    root = tmp_path_factory.mktemp("tiny-models")
    tiny_models.use_cache(root)
    return root


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The folder with the external reference data (``$QUEERBENCH_DATA_DIR``)."""
    value = os.environ.get("QUEERBENCH_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.fail("QUEERBENCH_DATA_DIR must point at the shared data folder (see README, 'Offline use')")
    return Path(value)


@pytest.fixture(scope="session")
def upstream_dir(shared_dir: Path) -> Path:
    """The upstream QueerBench data folder inside the shared directory."""
    return shared_dir / "upstream" / "queerbench" / "data"


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
    LM) load ``hub_id`` from ``folder``, resolved at commit ``c0ffee`` (what transformers records in
    ``config._commit_hash`` for a Hub model); every other name loads as usual."""
    import transformers

    served: dict[str, Path] = {}
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        real = cls.from_pretrained.__func__

        def from_hub(klass, name, *args, _real=real, **kwargs):
            out = _real(klass, served.get(name, name), *args, **kwargs)
            if name in served:
                config = getattr(out, "config", out)
                if isinstance(config, transformers.PretrainedConfig):
                    config._commit_hash = "c0ffee"
            return out

        monkeypatch.setattr(cls, "from_pretrained", classmethod(from_hub))

    def serve(hub_id: str, folder: Path) -> None:
        served[hub_id] = folder

    return serve
