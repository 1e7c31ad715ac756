"""Large local models: ``--device-map`` (accelerate's big-model loading) and the "does it fit?" check before loading.

:func:`check_device_map` validates a ``--device-map`` value and that accelerate, which transformers needs to place
a model over several devices, is importable. :func:`check_fits` refuses, in one line and before any weights are
read, a model whose weights at the requested dtype need more memory than the target has free: the weights' size
comes from the safetensors index (``metadata.total_size``) or the weight files of a local folder, rescaled from the
checkpoint's dtype to the requested one, or else from the parameter count of the architecture built on the meta
device (no memory) times the dtype's bytes. Free memory is :func:`free_memory`: one GPU for ``--device cuda:N``,
all visible GPUs plus the CPU's available RAM with a device map (accelerate offloads what the GPUs cannot hold),
available RAM for ``cpu``/``mps``. Importing this module does not import torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["DEVICE_MAPS", "check_device_map", "check_fits", "free_memory", "weights_bytes"]

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1}
GIB = 2**30


def check_device_map(device_map: str | None) -> None:
    """Raise a one-line ``ValueError`` for an unknown ``--device-map`` value, or one when accelerate is missing."""
    if device_map is None:
        return
    if device_map not in DEVICE_MAPS:
        raise ValueError(f"unknown --device-map {device_map!r}; use one of {', '.join(DEVICE_MAPS)} (or leave it out)")
    try:
        import accelerate  # noqa: F401  (transformers places the model with it)
    except ImportError:
        raise ValueError(
            "--device-map needs the accelerate package, which is not installed; pip install accelerate"
        ) from None


def _available_ram() -> int:
    """Bytes of RAM available to a new allocation (``MemAvailable`` on Linux, else free pages)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def free_memory(device: Any, device_map: str | None = None) -> tuple[int, str]:
    """``(free bytes, what was counted)`` where the model will live: the one place that asks the hardware."""
    import torch

    if device_map is not None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        free = sum(torch.cuda.mem_get_info(i)[0] for i in range(gpus))
        return free + _available_ram(), f"{gpus} GPU(s) and CPU RAM" if gpus else "CPU RAM"
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.mem_get_info(index)[0]), f"cuda:{index}"
    return _available_ram(), "CPU RAM" if device.type == "cpu" else f"{device.type} (system RAM)"


def _stored_dtype(config: Any) -> str | None:
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return None if value is None else str(value).removeprefix("torch.")


def _index_or_files(folder: Path) -> int | None:
    """The checkpoint's bytes on disk from its safetensors index or, lacking one, its weight files."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            try:
                doc = json.loads((folder / index).read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:  # the parser's text alone names no file
                raise ValueError(
                    f"{folder / index} is not valid JSON ({exc}); it is the model's weight index: restore it from the "
                    "model's source"
                ) from None
            total = (doc.get("metadata") or {}).get("total_size") if isinstance(doc, dict) else None
            if total:
                return int(total)
    for pattern in ("*.safetensors", "*.bin"):
        files = [p for p in folder.glob(pattern) if p.is_file() and not p.name.startswith("training_args")]
        if files:
            return sum(p.stat().st_size for p in files)
    return None


def _hub_index(model: str, revision: str | None) -> int | None:
    """``total_size`` of a Hub model's safetensors index, when it has one and it can be fetched (else None)."""
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(model, "model.safetensors.index.json", revision=revision)
        return int(json.loads(Path(path).read_text())["metadata"]["total_size"])
    except Exception:  # offline, no index (a single-file model), gated: fall back to the config's estimate
        return None


def _parameters(config: Any, causal: bool) -> int:
    """Parameter count of the architecture, built on the meta device (no memory is allocated)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    with torch.device("meta"):
        model = auto.from_config(config, trust_remote_code=False)
    return sum(p.numel() for p in model.parameters())


def weights_bytes(
    model: str, config: Any, dtype: str, *, causal: bool, revision: str | None = None, gguf: str | None = None
) -> tuple[int, str]:
    """``(bytes, source)``: what the weights of ``model`` take at ``dtype`` once loaded (see the module docstring).

    A GGUF file is quantised, so its size on disk says little about the dequantised model: it is counted from
    its config.
    """
    stored = None
    if gguf is None:
        folder = Path(model).expanduser()
        stored = _index_or_files(folder) if folder.is_dir() else _hub_index(model, revision)
    if stored is not None:
        source = "the checkpoint"
        ratio = _DTYPE_BYTES.get(dtype, 4) / _DTYPE_BYTES.get(_stored_dtype(config) or "", _DTYPE_BYTES.get(dtype, 4))
        return int(stored * ratio), source
    return _parameters(config, causal) * _DTYPE_BYTES.get(dtype, 4), "the config's parameter count"


def check_fits(
    model: str,
    config: Any,
    dtype: str,
    device: Any,
    device_map: str | None,
    *,
    causal: bool,
    revision: str | None = None,
    gguf: str | None = None,
) -> None:
    """Raise a one-line ``ValueError`` when ``model``'s weights at ``dtype`` exceed the free memory of the target."""
    need, source = weights_bytes(model, config, dtype, causal=causal, revision=revision, gguf=gguf)
    free, where = free_memory(device, device_map)
    if need <= free:
        return
    fixes = [] if dtype != "float32" else ["a smaller --dtype (bfloat16)"]
    if device_map is None:
        fixes.append("--device-map auto (spreads it over all visible GPUs and CPU RAM)")
    fixes.append("more GPUs")
    raise ValueError(
        f"--model {model} needs about {need / GIB:.1f} GiB in {dtype} (from {source}) but only "
        f"{free / GIB:.1f} GiB is free on {where}; use {', or '.join(fixes)}"
    )
