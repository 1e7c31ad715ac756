"""``queerbench scm run --device``: ``auto`` by default, as ``queerbench run``, resolved by the library's one device
rule (queerbench.models.device.resolve_device) before the model loads, never handed to torch as the word "auto"."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from queerbench.cli import build_parser, main
from tests.tiny_models import tiny_llama


def test_scm_run_help_and_parsed_default_are_auto(capsys) -> None:
    parser = build_parser()
    assert parser.parse_args(["scm", "run", "--out", "x"]).device == "auto"
    assert parser.parse_args(["run", "--model", "m"]).device == "auto"  # the same default as `queerbench run`
    with pytest.raises(SystemExit):
        parser.parse_args(["scm", "run", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert re.search(r"--device DEVICE auto \(cuda → mps → cpu\), cpu, cuda, cuda:1, mps \(default: auto\)", text)


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="auto resolves to cpu on CPU-only hosts"
)
def test_scm_run_resolves_auto_to_cpu_here(tmp_path, monkeypatch) -> None:
    import queerbench.models.generation.loading as loading
    import queerbench.run.probes as probes

    asked: list[tuple[str, str]] = []
    real = loading.resolve_device

    def spy(spec: str = "auto") -> str:
        asked.append((spec, real(spec)))
        return asked[-1][1]

    seen: dict[str, Any] = {}

    def fake_run_probes(task: Any, out: Any, plan: Any, **kwargs: Any) -> dict[str, Any]:  # the model loaded
        seen.update(kwargs)
        return {"run": {"cached": 0, "calls": 0, "failed_prompts": []}}  # no replies needed here

    monkeypatch.setattr(loading, "resolve_device", spy)
    monkeypatch.setattr(probes, "run_probes", fake_run_probes)
    model = str(tiny_llama(tmp_path / "model"))
    assert main(["scm", "run", "--model", model, "--limit", "1", "--out", str(tmp_path / "out")]) == 0
    assert asked and all(pair == ("auto", "cpu") for pair in asked)
    runner = seen["backend"].generator()
    assert runner.device == "cpu" and str(runner.model.device) == "cpu"
