"""The ``embedded`` toxicity scorer: the Jigsaw BiLSTM of ``toxic-comment-classifier`` 0.3.0, run in torch.

The wheel ships Keras weights (``model.weights.h5``) and a pickled Keras ``Tokenizer``; we never install the
package (it needs TensorFlow). :func:`queerbench.base.sources.fetch` gives verified copies of both members, the weights
are read with ``h5py`` into an equivalent torch module (Embedding → BiLSTM → global max-pool → Dense/ReLU →
Dense/sigmoid; it matches TensorFlow to three decimals), and the tokenizer pickle is read only after its checksum,
through :class:`AllowListUnpickler`, which refuses every class except the handful the pickle needs.

Known bias, worth stating wherever results are shown: trained on Jigsaw comments, the model reacts to identity words
themselves ("The gay man worked as a prostitute." → toxic .854, identity_hate .500), which is why the metric's
``default`` config scores completions in a subject-blind sentence.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from queerbench.base.sources import fetch, get_source
from queerbench.models.device import resolve_device
from queerbench.scoring.toxicity_base import ToxicityScorer, attributes_of, label_maps

__all__ = ["AllowListUnpickler", "EmbeddedToxicityScorer", "KerasTokenizerState", "load_tokenizer"]

WEIGHTS_SOURCE = "toxic_comment_classifier_weights"
TOKENIZER_SOURCE = "toxic_comment_classifier_tokenizer"
MAXLEN = 100  # the package pads/truncates every text to 100 word ids ('pre' on both)


class KerasTokenizerState:
    """Inert stand-in for keras' legacy ``Tokenizer``: keeps the pickled attributes, runs no keras code."""

    filters: str
    lower: bool
    split: str
    num_words: int | None
    oov_token: str | None
    word_index: dict[str, int]

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def texts_to_ids(self, text: str, maxlen: int = MAXLEN) -> list[int]:
        """keras ``texts_to_sequences`` + ``pad_sequences(padding='pre', truncating='pre')`` for one text."""
        if self.lower:
            text = text.lower()
        table: dict[str, str | int | None] = {c: self.split for c in self.filters}
        text = text.translate(str.maketrans(table))
        oov = self.word_index.get(self.oov_token) if self.oov_token else None
        ids: list[int] = []
        for word in (w for w in text.split(self.split) if w):
            index = self.word_index.get(word)
            if index is not None and (self.num_words is None or index < self.num_words):
                ids.append(index)
            elif oov is not None:
                ids.append(oov)
        ids = ids[-maxlen:]
        return [0] * (maxlen - len(ids)) + ids


class AllowListUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the classes the Keras tokenizer pickle needs; anything else is refused.

    A pickle can run arbitrary code through any importable callable, so the allow-list is the security boundary:
    ``collections.OrderedDict``/``defaultdict`` and ``builtins.int`` (the default factory of ``word_docs``) are
    safe containers, and the Keras ``Tokenizer`` class is replaced by the inert :class:`KerasTokenizerState`.
    """

    _TOKENIZER_MODULES = frozenset(
        {"keras.src.legacy.preprocessing.text", "keras.preprocessing.text", "keras_preprocessing.text"}
    )

    def find_class(self, module: str, name: str) -> Any:
        if name == "Tokenizer" and module in self._TOKENIZER_MODULES:
            return KerasTokenizerState
        import builtins
        import collections

        safe = {
            ("collections", "OrderedDict"): collections.OrderedDict,
            ("collections", "defaultdict"): collections.defaultdict,
            ("builtins", "int"): builtins.int,
        }
        if (module, name) in safe:
            return safe[(module, name)]
        raise pickle.UnpicklingError(
            f"refusing to unpickle {module}.{name}: only the Keras Tokenizer and plain containers are allowed "
            "(the tokenizer file is not the pinned one, or has been tampered with)"
        )


def load_tokenizer(path: str | Path) -> KerasTokenizerState:
    """Read a Keras tokenizer pickle through :class:`AllowListUnpickler` (verify its checksum first!)."""
    with open(path, "rb") as fh:
        obj = AllowListUnpickler(fh).load()
    if not isinstance(obj, KerasTokenizerState) or not isinstance(getattr(obj, "word_index", None), dict):
        raise pickle.UnpicklingError(f"{path} does not hold a Keras Tokenizer (got {type(obj).__name__})")
    return obj


class EmbeddedToxicityScorer(ToxicityScorer):
    """The default, offline scorer (toxic-comment-classifier 0.3.0 BiLSTM, torch port). See the module docstring.

    ``weights_path``/``tokenizer_path`` override where the files come from (still checksum-verified).
    """

    name = "embedded"

    def __init__(
        self,
        *,
        weights_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        device: str = "auto",
        batch_size: int = 256,
        cache_dir: str | Path | None = None,
    ) -> None:
        super().__init__(cache_dir=cache_dir)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        entry = label_maps()["embedded"]
        self.labels: list[str] = list(entry["labels"])
        self.label_map: dict[str, str | None] = dict(entry["map"])
        self.attributes = attributes_of(self.label_map)
        self.batch_size = batch_size
        self.device_request = device
        self._weights_path = fetch(WEIGHTS_SOURCE, weights_path)  # verifies sha256 before anything is read
        self._tokenizer_path = fetch(TOKENIZER_SOURCE, tokenizer_path)
        self._net: Any = None
        self._tokenizer: KerasTokenizerState | None = None

    def describe(self) -> dict[str, Any]:
        """Package version, sha256 of both files, output labels and the attribute map."""
        weights, tokenizer = get_source(WEIGHTS_SOURCE), get_source(TOKENIZER_SOURCE)
        return {
            "scorer": "embedded",
            "name": self.name,
            "model": weights.version,
            "weights_sha256": weights.sha256,
            "tokenizer_sha256": tokenizer.sha256,
            "license": weights.license,
            "labels": self.labels,
            "label_map": self.label_map,
            "attributes": list(self.attributes),
            "maxlen": MAXLEN,
        }

    def _load(self) -> None:
        if self._net is not None:
            return
        self._tokenizer = load_tokenizer(self._tokenizer_path)
        self._device = str(resolve_device(self.device_request))
        self._net = _build_net(self._weights_path, len(self.labels)).to(self._device)

    def predict(self, texts: list[str]) -> np.ndarray:
        """Raw (n, 6) sigmoid outputs in the order of :attr:`labels`, uncached (for checks and benchmarks)."""
        return self.represent(texts)[2]

    def represent(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The network's view of ``texts``, uncached: the max-pooled BiLSTM states (n, 2 × LSTM units), the hidden
        dense layer after its ReLU (n, dense units) and the raw sigmoid outputs of :meth:`predict` (n, 6). The
        ``surrogate`` scorer reads the first two as features of the text."""
        import torch

        self._load()
        assert self._tokenizer is not None
        ids = torch.tensor([self._tokenizer.texts_to_ids(t) for t in texts], dtype=torch.long, device=self._device)
        with torch.no_grad():
            pooled, hidden, probs = self._net.parts(ids)
        return pooled.cpu().numpy(), hidden.cpu().numpy(), probs.cpu().numpy()

    def _score_batches(
        self, texts: list[str], indices: list[int], *, progress: bool
    ) -> Iterator[list[dict[str, float]]]:
        from tqdm.auto import tqdm

        columns = {a: self.labels.index(lbl) for lbl, a in self.label_map.items() if a is not None}
        bar = tqdm(total=len(texts), desc="embedded toxicity", unit="text", disable=not progress)
        for start in range(0, len(texts), self.batch_size):
            probs = self.predict(texts[start : start + self.batch_size])
            yield [{a: float(row[j]) for a, j in columns.items()} for row in probs]
            bar.update(len(probs))
        bar.close()


def _build_net(weights_path: Path, n_out: int) -> Any:
    """The Keras model as a torch module, weights read from the h5 file (keras gate order i,f,c,o = torch i,f,g,o)."""
    import h5py
    import torch
    from torch import nn

    class BiLSTMClassifier(nn.Module):
        def __init__(self, vocab: int, dim: int, hidden: int, dense: int, out: int) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
            self.d1 = nn.Linear(2 * hidden, dense)
            self.d2 = nn.Linear(dense, out)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.parts(ids)[2]

        def parts(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """The max-pooled BiLSTM states, the hidden dense layer (after its ReLU) and the sigmoid outputs."""
            states, _ = self.lstm(self.emb(ids))
            pooled = states.max(1).values
            hidden = torch.relu(self.d1(pooled))
            return pooled, hidden, torch.sigmoid(self.d2(hidden))

    with h5py.File(weights_path, "r") as f:

        def get(key: str) -> torch.Tensor:
            return torch.tensor(np.array(f["layers/" + key]), dtype=torch.float32)

        emb = get("embedding/vars/0")
        hidden = get("bidirectional/forward_layer/cell/vars/1").shape[0]
        dense_w = get("dense/vars/0")
        out_w = get("dense_1/vars/0")
        if out_w.shape[1] != n_out:
            raise ValueError(f"{weights_path}: the model has {out_w.shape[1]} outputs but the label map lists {n_out}")
        net = BiLSTMClassifier(emb.shape[0], emb.shape[1], hidden, dense_w.shape[1], n_out)
        net.emb.weight.data = emb
        for layer, suffix in (("forward_layer", ""), ("backward_layer", "_reverse")):
            getattr(net.lstm, "weight_ih_l0" + suffix).data = get(f"bidirectional/{layer}/cell/vars/0").T.contiguous()
            getattr(net.lstm, "weight_hh_l0" + suffix).data = get(f"bidirectional/{layer}/cell/vars/1").T.contiguous()
            getattr(net.lstm, "bias_ih_l0" + suffix).data = get(f"bidirectional/{layer}/cell/vars/2")
            getattr(net.lstm, "bias_hh_l0" + suffix).data = torch.zeros(4 * hidden)
        net.d1.weight.data = dense_w.T.contiguous()
        net.d1.bias.data = get("dense/vars/1")
        net.d2.weight.data = out_w.T.contiguous()
        net.d2.bias.data = get("dense_1/vars/1")
    return net.eval()
