"""The ``hf:<model id or path>`` toxicity scorer: any transformers multi-label sequence classifier, its labels mapped to
Perspective's attribute names."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from queerbench.models import fingerprint
from queerbench.models.device import resolve_device
from queerbench.models.fingerprint import looks_like_path
from queerbench.scoring.toxicity_base import ALL_ATTRIBUTES, ToxicityScorer, _check_label_map, attributes_of, label_maps

__all__ = ["HFToxicityScorer"]

logger = logging.getLogger(__name__)


class HFToxicityScorer(ToxicityScorer):
    """Any transformers multi-label sequence classifier (sigmoid over the logits), e.g. ``unitary/toxic-bert``.

    The label → attribute map is, in order of preference: ``label_map`` given by the caller (every key must be one
    of the model's labels), or the known map (``toxicity_labels.json``) that covers most of the model's labels.
    Labels without an attribute are ignored; a model none of whose labels maps to an attribute is an error.
    Remote code is never trusted.
    """

    def __init__(
        self,
        model: str,
        *,
        label_map: dict[str, str | None] | None = None,
        device: str = "auto",
        batch_size: int = 32,
        max_length: int = 512,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        from transformers import AutoConfig

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_ref = str(model)
        self.name = f"hf:{self.model_ref}"
        if looks_like_path(self.model_ref) and not Path(self.model_ref).expanduser().is_dir():
            raise ValueError(
                f"toxicity model {self.model_ref!r}: no such folder; pass --toxicity hf:<folder saved with "
                "save_pretrained> or hf:<Hub id> (e.g. hf:unitary/toxic-bert)"
            )
        try:
            config = AutoConfig.from_pretrained(self.model_ref, trust_remote_code=False)
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"cannot load the config of toxicity model {self.model_ref!r}: {exc}. Pass a local folder with "
                "config.json, or a Hub id that is in your cache (Hub downloads need network access)."
            ) from exc
        labels = [str(config.id2label[i]) for i in range(config.num_labels)]
        self.labels = labels
        self.label_map, self.map_source = self._choose_map(labels, label_map)
        self.attributes = attributes_of(self.label_map)
        self._columns = {a: labels.index(lbl) for lbl, a in self.label_map.items() if a is not None}
        self.device_request = device
        self.batch_size = batch_size
        self.max_length = max_length
        self._revision = fingerprint.hub_commit(self.model_ref)  # None for a local folder
        self._weights_sha = self._local_weights_sha256()
        self._model: Any = None
        self._tokenizer: Any = None

    def _choose_map(
        self, labels: list[str], user_map: dict[str, str | None] | None
    ) -> tuple[dict[str, str | None], str]:
        if user_map is not None:
            mapping = _check_label_map(user_map, "label_map")
            unknown = sorted(set(mapping) - set(labels))
            if unknown:
                raise ValueError(
                    f"label_map names label(s) {unknown} that model {self.model_ref!r} lacks; its labels: {labels}"
                )
            chosen, source = mapping, "user"
        else:
            best, source, best_hits = {}, "none", 0
            for name, entry in label_maps().items():
                if name == "embedded":
                    continue
                hits = sum(1 for lbl in labels if entry["map"].get(lbl) is not None)
                if hits > best_hits:
                    best, source, best_hits = entry["map"], name, hits
            chosen = {lbl: best[lbl] for lbl in labels if lbl in best}
        if not any(v is not None for v in chosen.values()):
            raise ValueError(
                f"toxicity model {self.model_ref!r} has labels {labels}, none of which maps to an attribute "
                f"{list(ALL_ATTRIBUTES)}. Pass label_map={{'<label>': '<ATTRIBUTE>' or None, ...}}, or choose a "
                "multi-label toxicity classifier such as unitary/toxic-bert."
            )
        ignored = [lbl for lbl in labels if chosen.get(lbl) is None]
        if ignored:
            logger.info("%s: ignoring labels without an attribute: %s", self.name, ignored)
        return {lbl: chosen[lbl] for lbl in labels if lbl in chosen}, source

    def _local_weights_sha256(self) -> dict[str, str] | None:
        folder = Path(self.model_ref)
        if not folder.is_dir():
            return None
        from queerbench.base.sources import sha256_file

        files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())
        return {p.name: sha256_file(p) for p in files}

    def describe(self) -> dict[str, Any]:
        """Model reference, Hub revision or local weight hashes, labels and the attribute map."""
        return {
            "scorer": "hf",
            "name": self.name,
            "model": self.model_ref,
            "revision": self._revision,
            "weights_sha256": self._weights_sha,
            "labels": self.labels,
            "label_map": self.label_map,
            "label_map_source": self.map_source,
            "attributes": list(self.attributes),
            "max_length": self.max_length,
        }

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self._device = str(resolve_device(self.device_request))
        self._tokenizer = AutoTokenizer.from_pretrained(self.model_ref, trust_remote_code=False)
        model = AutoModelForSequenceClassification.from_pretrained(self.model_ref, trust_remote_code=False)
        self._model = model.to(self._device).eval()

    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        import torch
        from tqdm.auto import tqdm

        self._load()
        limit = min(self.max_length, getattr(self._tokenizer, "model_max_length", self.max_length) or self.max_length)
        bar = tqdm(total=len(texts), desc=self.name, unit="text", disable=not progress)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            enc = self._tokenizer(batch, padding=True, truncation=True, max_length=limit, return_tensors="pt")
            with torch.no_grad():
                logits = self._model(**{k: v.to(self._device) for k, v in enc.items()}).logits
            probs = torch.sigmoid(logits.float()).cpu().numpy()
            yield [{a: float(row[j]) for a, j in self._columns.items()} for row in probs]
            bar.update(len(batch))
        bar.close()
