"""Word → axis mapping: SADCAT's high/low direction, the threshold calibration, and the endpoint embedder."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from queerbench.tasks.scm.analysis import _axis_share
from queerbench.tasks.scm.axes import (
    AxisMapper,
    axis_coverage,
    calibrate_threshold,
    default_threshold,
    endpoint_embedder,
    load_sadcat,
    make_embedder,
)
from queerbench.tasks.scm.calibration import coverage_report, load_story_words
from queerbench.tasks.scm.data import load_embedder_thresholds, load_terms
from queerbench.tasks.scm.metric import score_responses
from queerbench.tasks.scm.pipeline import make_mapper

SEEDS = {a: [t.term for t in load_terms() if t.axis == a] for a in ("Warmth", "Competence")}


def test_sadcat_direction_keeps_cold_off_the_warm_pole() -> None:
    sadcat = load_sadcat()
    assert sadcat["cold"] == {"Warmth": -1} and sadcat["warm"]["Warmth"] == 1
    assert sadcat["incompetent"]["Competence"] == -1 and sadcat["strong"]["Competence"] == 1
    labels = AxisMapper(embedder=None).map_words(["cold", "warm", "friendly", "incompetent", "lazy"])
    assert labels["cold"].warmth and labels["cold"].warmth_dir == -1
    share = _axis_share(["cold", "cold", "warm", "incompetent"], labels)
    assert share["Warmth"] == 75.0  # the paper's unsigned share counts "cold" as Warmth ...
    assert share["Warmth_high"] == 25.0 and share["Warmth_low"] == 50.0 and share["Warmth_signed"] == -25.0
    assert share["Competence_low"] == 25.0 and share["Competence_signed"] == -25.0


def _toy_embedder(words: list[str]) -> np.ndarray:
    """Warm seeds → e1, competence seeds → e2; 'w*' words near e1 (cos ≈ 0.8), 'c*' near e2, others orthogonal."""
    out = []
    for w in words:
        if w in SEEDS["Warmth"]:
            out.append([1.0, 0.0, 0.0])
        elif w in SEEDS["Competence"]:
            out.append([0.0, 1.0, 0.0])
        elif w.startswith("w"):
            out.append([0.8, 0.0, 0.6])
        elif w.startswith("c"):
            out.append([0.0, 0.8, 0.6])
        else:
            out.append([0.1, 0.1, 0.99])
    return np.array(out)


def test_calibration_picks_the_threshold_that_agrees_with_the_dictionary() -> None:
    sadcat = {f"w{i}": {"Warmth": 1} for i in range(20)} | {f"c{i}": {"Competence": 1} for i in range(10)}
    vocab = list(sadcat) + [f"x{i}" for i in range(30)]
    res = calibrate_threshold(_toy_embedder, sadcat=sadcat, vocabulary=vocab, embedder_name="toy")
    assert 0.1 <= res["threshold"] < 0.8 and res["macro_f1"] == pytest.approx(1.0)
    assert res["axes"]["Warmth"]["share_passing"] == pytest.approx(20 / 60)
    assert res["at_paper_threshold"]["threshold"] == 0.55 and res["n_words"] == 60
    assert res["embedder"] == "toy" and "macro F1" in res["metric"]
    # a threshold above every similarity labels nothing: F1 0 at 0.9
    high = calibrate_threshold(_toy_embedder, sadcat=sadcat, vocabulary=vocab, thresholds=[0.9])
    assert high["macro_f1"] == 0.0


def test_bundled_threshold_for_minilm_is_the_calibrated_one_not_the_papers() -> None:
    table = load_embedder_thresholds()
    assert table["text-embedding-3-small"]["threshold"] == 0.55  # the paper's embedder, the paper's value
    mini = table["all-MiniLM-L6-v2"]
    assert mini["threshold"] < 0.55 and mini["agreement"]["macro_f1"] > mini["at_0.55"]["macro_f1"]
    assert "story content words" in mini["metric"] and mini["threshold"] > mini["sadcat_keys"]["threshold"]
    mapper = make_mapper("minilm")()
    assert mapper.threshold == mini["threshold"] and mapper.describe()["calibration"]["source"] == "data/embedders.json"
    assert make_mapper("minilm", 0.42)().threshold == 0.42
    with pytest.raises(ValueError, match="URL#MODEL"):
        make_embedder("word2vec")


def test_metric_and_cli_take_one_threshold_and_record_it() -> None:
    from pathlib import Path

    import evaluate

    default, how = default_threshold("all-MiniLM-L6-v2")
    assert how["source"] == "data/embedders.json"
    assert AxisMapper(embedder=_toy_embedder).threshold == default == make_mapper("minilm")().threshold
    with pytest.raises(ValueError, match="queerbench scm calibrate"):
        AxisMapper(embedder=_toy_embedder, embedder_name="my-embedder")
    res = score_responses(["1. Brave\n2. Strong"], ["bisexual"], ["elicitation"], mapper=AxisMapper(embedder=None))
    assert res["mapper"]["threshold"] is None and "SADCAT" in res["mapper"]["dictionary"]
    assert score_responses(["Rating: 3"], ["women"], ["rating"], terms=["warm"])["mapper"] is None
    metric = evaluate.load(str(Path(__file__).resolve().parents[1] / "metric_queerbench"), "scm")
    out = metric.compute(predictions=["1. Brave\n2. Kind"], groups=["lesbians"], prompt_types=["elicitation"])
    assert out["mapper"]["threshold"] == default and out["mapper"]["embedder"] == "all-MiniLM-L6-v2"


def test_story_words_as_negatives_raise_the_threshold() -> None:
    """Ordinary words that sit near the Warmth centroid (cos 0.5) but are not in SADCAT: calibrated on SADCAT's
    keys alone they never weigh in and the lowest perfect threshold passes them; as labelled story words they do."""

    def embed(words: list[str]) -> np.ndarray:
        return np.array([[0.5, 0.0, 0.866] if w.startswith("o") else list(_toy_embedder([w])[0]) for w in words])

    sadcat = {f"w{i}": {"Warmth": 1} for i in range(10)} | {f"c{i}": {"Competence": 1} for i in range(10)}
    keys_only = calibrate_threshold(embed, sadcat=sadcat, vocabulary=list(sadcat))
    labelled = {w: set(a) for w, a in sadcat.items()} | {f"o{i}": set() for i in range(30)}
    stories = calibrate_threshold(embed, sadcat={}, labelled=labelled, compare_at=(keys_only["threshold"],))
    assert keys_only["threshold"] < 0.5 <= stories["threshold"] < 0.8 and stories["macro_f1"] == pytest.approx(1.0)
    assert stories["at"][str(keys_only["threshold"])]["axes"]["Warmth"]["precision"] == pytest.approx(10 / 40)


def test_axis_coverage_counts_tokens_by_source() -> None:
    labels = AxisMapper(embedder=None, lemmatize=None).map_words(["warm", "table", "intelligent"])
    cov = axis_coverage(["warm", "warm", "table", "intelligent"], labels)
    assert cov["Warmth"] == {"total": 50.0, "sadcat": 50.0, "embedding": 0.0}
    assert cov["Competence"]["total"] == 25.0 and cov["neither"]["total"] == 25.0
    words = load_story_words()
    assert len(words) > 500 and {"eyes", "hair"} <= set(words)
    res, lines = coverage_report(["She has warm eyes and a kind smile."], _toy_embedder, "all-MiniLM-L6-v2", 0.5)
    assert set(res["at"]) == {"0.5", str(default_threshold("all-MiniLM-L6-v2")[0]), "0.37", "0.55"}
    assert res["n_tokens"] >= 4 and res["n_texts"] == 1  # has / warm / eyes / kind / smile, as spaCy tags them
    assert res["at"]["0.5"]["Warmth"]["sadcat"] > 0 and lines[0].startswith("  at 0.5: Warmth")


class _FakeEmbeddings:
    """POST /v1/embeddings: a deterministic 4-d vector per input; the first ``fail`` requests get HTTP 500."""

    def __init__(self, fail: int = 0) -> None:
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.fail = fail
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                outer.bodies.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                if outer.fail > 0:
                    outer.fail -= 1
                    self.send_response(500)
                    self.end_headers()
                    return
                data = [
                    {"index": i, "embedding": [len(t), t.count("a"), 1.0, float(i)]}
                    for i, t in enumerate(body["input"])
                ][::-1]  # out of order on purpose: the client must sort by index
                raw = json.dumps({"data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_endpoint_embedder_batches_sorts_retries_and_sends_the_key(monkeypatch) -> None:
    monkeypatch.setenv("QB_EMB_KEY", "sk-emb-123")
    monkeypatch.setattr("time.sleep", lambda s: None)
    server = _FakeEmbeddings(fail=1)
    try:
        _embed, name = make_embedder(f"{server.url}#text-embedding-3-small", api_key_env="QB_EMB_KEY")
        assert name.endswith("#text-embedding-3-small")
        emb = endpoint_embedder(server.url, "text-embedding-3-small", api_key_env="QB_EMB_KEY", batch_size=2)(
            ["aa", "b", "aaa"]
        )
        assert emb.shape == (3, 4) and emb[:, 0].tolist() == [2, 1, 3] and emb[:, 1].tolist() == [2, 0, 3]
        assert [b["input"] for b in server.bodies[1:]] == [["aa", "b"], ["aaa"]]  # first request got a 500
        assert set(server.auth) == {"Bearer sk-emb-123"} and server.bodies[0]["model"] == "text-embedding-3-small"
        # the paper's embedder takes the paper's threshold through the mapper factory
        mapper = make_mapper(f"{server.url}#text-embedding-3-small", api_key_env="QB_EMB_KEY")()
        assert mapper.threshold == 0.55 and mapper.embedder_name.endswith("text-embedding-3-small")
    finally:
        server.close()
