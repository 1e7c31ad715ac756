"""The demo Space in a real browser: Playwright drives the system's headless Chromium, found by its usual names
(``chromium``, ``chromium-browser``, ``google-chrome``, ``google-chrome-stable`` on ``PATH``, then
``/usr/bin/chromium``). Without one the test skips with that reason on a developer's machine and fails in CI (``CI``
set), which must run it (``.ci/run`` installs Debian's ``chromium``), as the engine tests do (``tests/engines.py``).

Loads the page, runs a quick evaluation of a tiny local BERT (2 templates), checks that the score table, the plot and
the per-sentence table render with harmful completions hidden, and saves a screenshot under pytest's ``tmp_path``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from queerbench.hub.space import HIDDEN, build_demo
from tests.net import free_port
from tests.tiny_models import tiny_bert

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_PATH = "/usr/bin/chromium"


def find_chromium() -> str | None:
    """The first of :data:`CHROMIUM_NAMES` on ``PATH``, else :data:`CHROMIUM_PATH` if it is there, else None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return CHROMIUM_PATH if os.access(CHROMIUM_PATH, os.X_OK) else None


def need_chromium() -> str:
    """Chromium's path; without one, skip (locally) or fail (in CI) the calling test with the install hint."""
    found = find_chromium()
    if found is not None:
        return found
    reason = (
        f"no Chromium found ({', '.join(CHROMIUM_NAMES)} on PATH, or {CHROMIUM_PATH}): install it, e.g. "
        "apt-get install chromium, to run the browser test"
    )
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def test_chromium_is_found_by_its_usual_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("google-chrome-stable", "chromium-browser"):  # the earlier name in CHROMIUM_NAMES wins
        browser = tmp_path / name
        browser.write_text("#!/bin/sh\n")
        browser.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_chromium() == str(tmp_path / "chromium-browser")
    (tmp_path / "chromium-browser").unlink()
    assert find_chromium() == str(tmp_path / "google-chrome-stable")


def test_without_chromium_it_skips_locally_and_fails_in_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM_PATH", str(tmp_path / "no-chromium"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium found"):
        need_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no Chromium found"):
        need_chromium()


def test_quick_evaluation_in_a_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chromium = need_chromium()
    model = tiny_bert(tmp_path / "models")
    monkeypatch.setenv("QUEERBENCH_SPACE_ALLOW_LOCAL", "1")
    monkeypatch.setenv("QUEERBENCH_SPACE_QUICK_TEMPLATES", "2")
    demo = build_demo()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), ssr_mode=False, quiet=True
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            page.goto(url)
            expect(page.get_by_text("Content note.")).to_be_visible(timeout=60_000)
            box = page.locator("#model-id textarea, #model-id input").first
            box.fill(str(model))
            page.locator("#evaluate-button").click()
            expect(page.locator("#status")).to_contain_text("Done", timeout=180_000)

            scores = page.locator("#scores")
            for group in ("queer", "non-queer", "binary", "neutral", "neo"):
                expect(scores.get_by_text(group, exact=True).filter(visible=True).first).to_be_visible()
            image = page.locator("#comparison-plot img").first
            expect(image).to_be_visible()
            assert image.evaluate("img => img.complete && img.naturalWidth > 100")
            expect(page.locator("#sentences").get_by_text(HIDDEN).filter(visible=True).first).to_be_visible()

            shot = tmp_path / "space.png"
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        assert shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        demo.close()


def test_the_leaderboard_tab_in_a_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Leaderboard tab shows the reference rows and a result pushed to the (mock) results dataset, ranked."""
    import json

    import huggingface_hub.constants

    from queerbench.reporting.rows import ResultRow
    from queerbench.results.reference import bundled_reference_path, load_reference_rows
    from tests.hub_server import HubServer

    chromium = need_chromium()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; the mock is local
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))  # the bundled reference rows
    bundled = len(load_reference_rows(bundled_reference_path()))  # the 44 published rows under every scorer
    pushed = ResultRow(
        task="paper", benchmark="QueerBench", model="pushed-model-xyz", method="mlm", k=5, toxicity="perspective",
        scores={"queer": 0.5, "non-queer": 0.4}, n={"queer": 10}, source="runs/p",
    )  # fmt: skip
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        repo = hub.state.add_repo("dataset", "queerbench/queerbench-results")
        repo.files["results/pushed/abc/results.json"] = json.dumps({"rows": [pushed.to_dict()]}).encode()
        demo = build_demo()
        _, url, _ = demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), ssr_mode=False, quiet=True
        )
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1400, "height": 2000})
                page.goto(url)
                page.get_by_role("tab", name="Leaderboard").click()
                expect(page.get_by_text(f"{bundled} reference rows and 1 pushed")).to_be_visible(timeout=60_000)
                table = page.locator("#leaderboard-table")
                expect(table.get_by_text("bert-base-uncased").filter(visible=True).first).to_be_visible()
                page.locator("#leaderboard-task input").first.click()
                page.get_by_role("option", name="paper", exact=True).click()
                page.locator("#leaderboard-k input").first.click()
                page.get_by_role("option", name="5", exact=True).click()
                expect(table.get_by_text("pushed-model-xyz").filter(visible=True).first).to_be_visible(timeout=30_000)
                expect(table.get_by_text("0.5", exact=True).filter(visible=True).first).to_be_visible()
                shot = tmp_path / "leaderboard.png"
                page.screenshot(path=str(shot), full_page=True)
                browser.close()
            assert shot.stat().st_size > 10_000
        finally:
            demo.close()


def test_an_offline_evaluation_says_why_in_the_status_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the Hub unreachable, Evaluate and Complete put what failed and why in their status lines (no bare
    "Error" badges under a status that still says "Choose a model")."""
    import huggingface_hub.constants

    chromium = need_chromium()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # conftest sets it; nothing listens
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("QUEERBENCH_CACHE", str(tmp_path / "cache"))
    demo = build_demo()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), ssr_mode=False, quiet=True
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            page.goto(url)
            expect(page.get_by_text("Content note.")).to_be_visible(timeout=60_000)
            page.locator("#evaluate-button").click()
            status = page.locator("#status")
            expect(status).to_contain_text("Could not evaluate", timeout=60_000)
            expect(status).to_contain_text("cannot be reached")
            expect(page.locator("#scores").get_by_text("Error", exact=True)).to_have_count(0)
            page.get_by_role("tab", name="Playground").click()
            page.locator("#playground-button").click()
            expect(page.locator("#playground-status")).to_contain_text("cannot be reached", timeout=60_000)
            browser.close()
    finally:
        demo.close()


def test_the_viewer_report_shows_its_figures_with_harmful_words_hidden(tmp_path: Path) -> None:
    """`queerbench view`: the Report tab's figures load, and the completions the Items tab hides are hidden there."""
    from queerbench.hub.space.viewer import build_viewer
    from tests.test_space_defects import _run_folder

    chromium = need_chromium()
    folder = _run_folder(tmp_path)
    app = build_viewer(folder)
    _, url, _ = app.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), ssr_mode=False, quiet=True
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(url)
            report = page.locator("#view-report")
            expect(report).to_contain_text("Most harmful completions", timeout=60_000)
            image = report.locator("img").first
            expect(image).to_be_visible()
            assert image.evaluate("img => img.complete && img.naturalWidth > 0")
            assert "bitch" not in report.inner_text() and "prostitute" not in report.inner_text()
            page.get_by_label("Show harmful completions (slurs and hate)").check()
            expect(report).to_contain_text("bitch", timeout=30_000)
            browser.close()
    finally:
        app.close()
