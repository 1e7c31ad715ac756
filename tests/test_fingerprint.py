"""Model fingerprints: every weight, tokenizer and config change is seen, a resume against changed weights is
refused, and a run records what it ran on."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from queerbench.models.fingerprint import describe_fingerprint, fingerprint_model, fingerprints_differ
from queerbench.run.pipeline import RunOptions, run_benchmark
from tests.run_parts import fix_part_size
from tests.tiny_models import tiny_bert

FAST = {"n_bootstrap": 0, "n_permutations": 0}


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def _rewrite_same_size(path: Path) -> None:
    """Change a file's bytes but keep its size and mtime (what a size + mtime check cannot see)."""
    info = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


# ------------------------------------------------------------------------------------------------- fingerprints
def test_fingerprint_sees_every_weight_and_tokenizer_change(bert: Path, tmp_path: Path):
    model = Path(shutil.copytree(bert, tmp_path / "copy"))
    first = fingerprint_model(str(model))
    assert first["kind"] == "local" and {"model.safetensors", "config.json"} <= set(first["files"])
    assert any(name.startswith(("vocab", "tokenizer")) for name in first["files"])
    assert fingerprint_model(model) == first  # stable, and the same for str and Path
    _rewrite_same_size(model / "model.safetensors")
    second = fingerprint_model(model)
    assert second["sha256"] != first["sha256"] and fingerprints_differ(first, second) == ["model.safetensors"]
    (model / "vocab.txt").write_text((model / "vocab.txt").read_text() + "newword\n")
    assert fingerprints_differ(second, fingerprint_model(model)) == ["vocab.txt"]
    assert describe_fingerprint(second) == f"local folder, fingerprint {second['sha256'][:12]}"


def test_fingerprint_of_a_single_model_file(tmp_path: Path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    first = fingerprint_model(gguf)
    assert first["kind"] == "local" and list(first["files"]) == ["model.gguf"]
    _rewrite_same_size(gguf)
    assert fingerprints_differ(first, fingerprint_model(gguf)) == ["model.gguf"]


def test_fingerprint_of_a_hub_id_and_of_an_empty_folder(tmp_path: Path):
    assert fingerprint_model("org/some-model") == {"kind": "id", "model": "org/some-model", "sha256": None}
    assert describe_fingerprint(fingerprint_model("org/some-model")) is None
    with pytest.raises(ValueError, match="holds no weight"):
        fingerprint_model(tmp_path)


def test_resume_against_changed_weights_is_refused(bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The issue's data corruption: kill a run on a local folder, replace its weights, rerun."""
    model = Path(shutil.copytree(bert, tmp_path / "model"))
    fix_part_size(monkeypatch, 40)
    import queerbench.models.masked.predict as predict_module

    real, calls = predict_module.predict, {"n": 0}

    def killed_after_two_chunks(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(predict_module, "predict", killed_after_two_chunks)
    options = RunOptions(model=str(model), limit=2, toxicity="none", **FAST)
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    chunks = {p.name: p.read_bytes() for p in (tmp_path / "r/.chunks").glob("chunk-*.parquet")}
    assert len(chunks) == 2
    monkeypatch.setattr(predict_module, "predict", real)
    _rewrite_same_size(model / "model.safetensors")
    with pytest.raises(ValueError, match=r"changed since the run .*\(model\.safetensors\)"):
        run_benchmark(options, tmp_path / "r", log=lambda _: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "r/.chunks").glob("chunk-*.parquet")} == chunks
    assert not (tmp_path / "r/predictions.parquet").exists()


def test_a_run_records_its_fingerprint(bert: Path, tmp_path: Path):
    result = run_benchmark(RunOptions(model=str(bert), limit=1, toxicity="none", **FAST), tmp_path / "r", log=print)
    stored = json.loads((tmp_path / "r/run.json").read_text())
    assert stored["model_fingerprint"] == fingerprint_model(bert)
    assert result.scores["run"]["fingerprint"]["sha256"] == stored["model_fingerprint"]["sha256"]
    report = (tmp_path / "r/report.md").read_text()
    assert f"local folder, fingerprint {stored['model_fingerprint']['sha256'][:12]}" in report
    assert "revision `unknown`" not in report and "reading `neutral_sentence`" not in report
    assert "not scored (`--toxicity none`)" in report
    assert f"*Heatmap: {bert.name} · default config · top-5.*" in report  # every figure has a caption
