"""The demo Space in a real browser: Playwright drives Debian's headless Chromium (``/usr/bin/chromium``).

Loads the page, runs a quick evaluation of a tiny local BERT (2 templates), checks that the score table, the plot and
the per-sentence table render with harmful completions hidden, and saves a screenshot under pytest's ``tmp_path``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright
from tiny_models import tiny_bert

from queerbench.hub.space import HIDDEN, build_demo

CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_quick_evaluation_in_a_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Path(CHROMIUM).is_file(), "install Debian's chromium: apt-get install -y chromium"
    model = tiny_bert(tmp_path / "models")
    monkeypatch.setenv("QUEERBENCH_SPACE_ALLOW_LOCAL", "1")
    monkeypatch.setenv("QUEERBENCH_SPACE_QUICK_TEMPLATES", "2")
    demo = build_demo()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), ssr_mode=False, quiet=True
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
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
