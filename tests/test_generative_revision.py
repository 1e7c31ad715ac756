"""``--revision`` reaches the loader of a local causal LM in both generative methods, and means nothing to an endpoint.

The Hub cannot be reached here, so the loader is watched where transformers receives its arguments: the spies record
the keyword arguments and call the real ``from_pretrained`` (a local folder ignores ``revision``), so everything
after them is the real code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from queerbench.cli import main
from queerbench.methods.registry import load_predictor
from queerbench.run.pipeline import RunOptions
from tests.tiny_models import tiny_gpt2, tiny_llama


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    seen: list[tuple[str, dict]] = []
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = cls.from_pretrained.__func__

        def spy(klass, *args, _real=real, _name=cls.__name__, **kwargs):
            seen.append((_name, dict(kwargs)))
            return _real(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    return seen


@pytest.mark.parametrize("method", ["scored", "instructed"])
def test_revision_is_passed_to_the_causal_lm_loader(tmp_path: Path, calls, method: str) -> None:
    model = str(tiny_gpt2(tmp_path) if method == "scored" else tiny_llama(tmp_path))
    options = RunOptions(model=model, method=method, revision="0123abc", top_k=2, toxicity="none")
    predictor = load_predictor(options, tmp_path / "replies.sqlite")
    names = {name for name, _ in calls}
    assert names == {"AutoModelForCausalLM", "AutoTokenizer"}
    assert all(kwargs.get("revision") == "0123abc" for _, kwargs in calls), calls
    assert predictor.metadata()["fingerprint"]["kind"] == "local"  # a folder: its files, whatever the revision
    calls.clear()
    load_predictor(RunOptions(model=model, method=method, top_k=2, toxicity="none"), tmp_path / "other.sqlite")
    assert calls and all("revision" not in kwargs for _, kwargs in calls)  # no revision: none sent


def test_revision_with_an_endpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "run",
        "--endpoint",
        "http://127.0.0.1:9/v1",
        "--model",
        "m",
        "--revision",
        "abc",
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--revision" in err[0] and "--endpoint" in err[0]
    assert not (tmp_path / "o").exists()
