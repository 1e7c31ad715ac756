"""Large local models: ``--device-map`` (accelerate's placement) and the "too large for free memory" refusal.

On a CPU-only machine accelerate maps every layer to the CPU (a one-device map, for which transformers sets no
``hf_device_map``: the tests see the map reach ``from_pretrained`` instead), so a model loaded with
``--device-map auto`` must give exactly the predictions it gives without one (masked LM and ``scored``). A model larger than the free memory
(faked by replacing the one function that asks the hardware) is refused in one line before any weights load;
``--device-map`` without accelerate is one line with the install command; the flag reaches the SCM probes' loader.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import queerbench.models.generation.local as local
import queerbench.models.memory as memory
from queerbench.cli import main
from queerbench.methods.scored.predictor import ScoredPredictor
from queerbench.models.masked.predict import load_masked_lm, predict
from queerbench.models.spec import ModelSpec
from tests.tiny_models import tiny_bert, tiny_llama

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCES = ["The gay person is a [MASK].", "The lesbian person dreams of being a [MASK].", "[MASK] is kind."]
BLANKS = ["The gay person is a [MASK].", "The straight person should work as a [MASK]."]


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("llama"))


@pytest.fixture()
def placed(monkeypatch: pytest.MonkeyPatch) -> list:
    """The ``device_map`` each ``from_pretrained`` of a masked or causal LM was called with (weights still load)."""
    import transformers

    seen: list = []
    for name in ("AutoModelForMaskedLM", "AutoModelForCausalLM"):
        auto = getattr(transformers, name)

        def spy(*args, _real=auto.from_pretrained, **kwargs):
            seen.append(kwargs.get("device_map"))
            return _real(*args, **kwargs)

        monkeypatch.setattr(auto, "from_pretrained", spy)
    return seen


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["run", "--limit", "1", "--top-k", "2", "--toxicity", "none", "--bootstrap", "10", *args])
    return code, capsys.readouterr().err


def test_mlm_predictions_are_the_same_with_a_device_map(bert: Path, placed: list) -> None:
    plain = load_masked_lm(str(bert), device="cpu")
    mapped = load_masked_lm(str(bert), device="cpu", device_map="auto")
    assert placed == [None, "auto"] and mapped.device == torch.device("cpu")
    assert mapped.metadata()["device_map"] == "auto" and plain.metadata()["device_map"] is None
    for mode in ("whole_word", "raw"):
        a, b = predict(plain, SENTENCES, 5, mode=mode), predict(mapped, SENTENCES, 5, mode=mode)
        assert a.tokens == b.tokens and a.ids == b.ids
        assert torch.allclose(torch.tensor(a.probs), torch.tensor(b.probs), atol=1e-6)


def test_scored_predictions_are_the_same_with_a_device_map(llama: Path, placed: list) -> None:
    spec = ModelSpec(device="cpu", dtype="float32", batch_size=8)
    plain = ScoredPredictor(str(llama), top_k=3, spec=spec)
    mapped = ScoredPredictor(str(llama), top_k=3, spec=replace(spec, device_map="auto"))
    assert placed == [None, "auto"]
    assert mapped.metadata()["device_map"] == "auto" and plain.metadata()["device_map"] is None
    # the backend knows the model is placed: it shares no prefixes over devices
    assert mapped.backend.metadata()["device_map"] == "auto" and not mapped.backend.metadata()["share_prefixes"]
    a, b = plain.predict([], BLANKS, lambda n: None), mapped.predict([], BLANKS, lambda n: None)
    assert a["tokens"] == b["tokens"]
    assert torch.allclose(torch.tensor(a["logprobs"]), torch.tensor(b["logprobs"]), atol=1e-5)


def test_device_map_is_recorded_but_not_in_the_key(bert: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code, err = _run(capsys, "--model", str(bert), "--device", "cpu", "--device-map", "auto", "--out", str(out))
    assert code == 0, err
    scores = json.loads((out / "scores.json").read_text())
    assert scores["run"]["model_metadata"]["device_map"] == scores["run"]["options"]["device_map"] == "auto"
    assert "device_map" not in (out / "run.json").read_text()  # the key (and all of run.json) is as before
    first = (out / "predictions.parquet").read_bytes()
    code, err = _run(capsys, "--model", str(bert), "--device", "cpu", "--out", str(out))  # same key: reused
    assert code == 0, err
    assert (out / "predictions.parquet").read_bytes() == first


def _tiny_free(monkeypatch: pytest.MonkeyPatch, seen: list) -> None:
    def free(device, device_map=None):
        seen.append(device_map)
        return 1000, "cuda:0"

    monkeypatch.setattr(memory, "free_memory", free)


def test_a_model_too_large_is_refused_before_loading(bert: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    seen: list = []
    _tiny_free(monkeypatch, seen)
    out = tmp_path / "run"
    code, err = _run(capsys, "--model", str(bert), "--device", "cpu", "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    need = sum(p.stat().st_size for p in bert.glob("*.safetensors")) / 2**30
    assert f"needs about {need:.1f} GiB in float32" in err and "0.0 GiB is free on cuda:0" in err
    assert "--dtype" in err and "--device-map auto" in err and "more GPUs" in err
    assert not out.exists()  # refused in the preflight: nothing claimed, nothing half-written
    code, err = _run(capsys, "--model", str(bert), "--device-map", "auto", "--out", str(out))
    assert code == 2 and seen[-1] == "auto" and "--device-map auto (" not in err  # already used: not suggested


def test_causal_refusal_comes_before_the_weights(llama: Path, monkeypatch) -> None:
    _tiny_free(monkeypatch, [])

    def never(*args, **kwargs):
        raise AssertionError("weights were loaded")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", never)
    with pytest.raises(ValueError, match=r"needs about .* GiB in bfloat16 .* free on cuda:0"):
        local.load_causal_lm(str(llama), dtype="bfloat16")


@pytest.mark.parametrize("method", ["scored", "instructed"])
def test_a_causal_lm_too_large_is_refused_before_the_run_claims_its_folder(
    llama: Path, method: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The generative methods make the same check as ``mlm`` in the run's preflight: one line, no folder, no
    weights read."""
    _tiny_free(monkeypatch, [])

    def never(*args, **kwargs):
        raise AssertionError("the run went past its preflight")

    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", never)
    monkeypatch.setattr("queerbench.run.pipeline.claim_out_dir", never)
    monkeypatch.setattr("queerbench.models.registry.fingerprint_model", never)  # before the weights are hashed, too
    out = tmp_path / "run"
    code, err = _run(capsys, "--model", str(llama), "--method", method, "--device", "cpu", "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "GiB in float32" in err and "0.0 GiB is free on cuda:0" in err
    assert not out.exists()


def test_size_comes_from_the_index_or_the_config(bert: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForMaskedLM

    config = AutoConfig.from_pretrained(bert)
    folder = Path(shutil.copytree(bert, tmp_path / "copy"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 8 * 2**30}}))
    stored = str(getattr(config, "dtype", None) or config.torch_dtype).removeprefix("torch.")
    scale = {"float32": 1, "bfloat16": 2}[stored]
    assert memory.weights_bytes(str(folder), config, "bfloat16", causal=False)[0] == 8 * 2**30 * scale // 2
    for f in [*folder.glob("*.safetensors"), folder / "model.safetensors.index.json"]:
        f.unlink()
    params = sum(p.numel() for p in AutoModelForMaskedLM.from_pretrained(bert).parameters())
    got, source = memory.weights_bytes(str(folder), config, "bfloat16", causal=False)
    assert (got, source) == (2 * params, "the config's parameter count")


def test_device_map_without_accelerate_is_one_line(bert: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "accelerate", None)  # `import accelerate` now raises ImportError
    code, err = _run(capsys, "--model", str(bert), "--device-map", "auto", "--out", str(tmp_path / "r"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("queerbench: error:") and err.strip().endswith("pip install accelerate")
    assert not (tmp_path / "r").exists()
    code, err = _run(capsys, "--model", str(bert), "--device-map", "everywhere", "--out", str(tmp_path / "r"))
    assert code == 2 and "unknown --device-map 'everywhere'" in err


def test_scm_run_loads_with_the_device_map_and_dtype(llama: Path, tmp_path: Path, monkeypatch, placed) -> None:
    loaded: list = []
    real = local.load_causal_lm

    class Loaded(Exception):
        pass

    def spy(*args, **kwargs):
        lm, _ = real(*args, **kwargs)
        loaded.append((kwargs, lm.dtype))
        raise Loaded

    monkeypatch.setattr(local, "load_causal_lm", spy)
    with pytest.raises(Loaded):
        main(
            ["scm", "run", "--model", str(llama), "--device-map", "auto", "--dtype", "bfloat16", "--out", str(tmp_path)]
        )
    ((kwargs, dtype),) = loaded
    assert kwargs["device_map"] == "auto" and kwargs["dtype"] == "bfloat16"
    assert placed == ["auto"] and dtype == torch.bfloat16
