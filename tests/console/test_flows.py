"""The console in a real browser, as a person uses it: sign in, pick an index, search, ask and read the streamed
answer, open a citation; upload files; what a reader may not see; a wrong or revoked key."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from playwright.sync_api import expect

from tests.console.conftest import ADMIN, released, sign_in


def test_sign_in_search_ask_see_the_answer_stream_and_open_a_citation(engine, page):
    sign_in(page, engine.base, ADMIN)
    assert page.url == f"{engine.base}/ui/"
    assert page.inner_text("#who") == "api-key · admin"
    page.select_option("#index-select", "handbook")
    page.wait_for_selector("#doc-rows tr")
    assert "3 of 3 document(s)" in page.inner_text("#doc-count")

    page.click('[data-view="search"]')
    page.fill("#search-query", "how do I restart the pump")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-rows tr")
    explain = page.inner_text("#search-explain")
    assert "convex fusion" in explain and "chat threshold 0.30" in explain, explain
    first = page.locator("#search-rows tr").first
    cells = first.locator("td").all_inner_texts()
    assert cells[2] == "#1" and cells[3] == "#1", cells  # both legs ranked the pump page first
    assert "handbook.pdf (p. 41" in cells[5], cells

    page.click('[data-view="chat"]')
    engine.llm.reply = "Close valve V-7, then press the green button for three seconds."
    engine.llm.split = lambda text: re.findall(r"\S+\s*", text)  # word by word, spaces kept
    engine.llm.stream_hold_after = 3
    with released(engine.llm):
        page.fill("#chat-input", "How do I restart the pump?")
        page.click("#chat-send")
        # streaming: part of the answer shows while the LLM still holds the rest
        expect(page.locator(".msg.assistant .text")).to_have_text(re.compile(r"^Close valve"))
        assert page.get_attribute(".msg.assistant", "aria-busy") == "true"
        assert "three seconds" not in page.inner_text(".msg.assistant .text")
    page.wait_for_selector(".msg.assistant:not([aria-busy])")
    assert page.inner_text(".msg.assistant .text") == engine.llm.reply
    citation = page.locator(".citations button").first
    assert citation.inner_text().startswith("[1] handbook.pdf, p. 41"), citation.inner_text()
    citation.click()
    page.wait_for_selector("#chunk[open]")
    assert "valve V-7" in page.inner_text("#chunk-text")
    expect(page.locator("#chunk-doc")).to_contain_text("green button")
    assert "Plant handbook" in page.inner_text("#chunk-meta")
    page.click("#chunk-close")
    assert not page.is_visible("#chunk")

    assert page.watch.console_errors() == [], page.watch.console
    foreign = [u for u in page.watch.requests if urlsplit(u).netloc != urlsplit(engine.base).netloc
               and not u.startswith(("data:", "blob:"))]
    assert foreign == [], foreign
