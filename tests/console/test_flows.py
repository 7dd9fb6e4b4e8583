"""The console in a real browser, as a person uses it: sign in, pick an index, search, ask and read the streamed
answer, open a citation; upload files; what a reader may not see; a wrong or revoked key."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import expect

from tests.console.conftest import ACCESS, ADMIN, READER, admin, released, sign_in


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


def test_upload_files_into_an_index_and_a_vector_store_and_watch_each_complete(engine, page, tmp_path):
    good = tmp_path / "valves.md"
    good.write_text("# Valves\n\nValve V-9 stays shut while the pump runs.\n")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog")
    store = admin(engine.base, "POST", "/v1/vector_stores", json={"name": "manuals"}).json()["id"]
    sign_in(page, engine.base, ADMIN)
    page.click('[data-view="upload"]')
    page.fill("#upload-index", "uploads")  # a new index: the upload creates it
    page.set_input_files("#upload-files", [str(good), str(broken)])
    page.click("#upload-form button[type=submit]")
    rows = page.locator("#upload-rows tr")
    expect(rows.nth(0).locator(".file-status")).to_have_text("indexed: 1 document(s) in uploads")
    expect(rows.nth(1).locator(".file-status")).to_contain_text("failed: ")
    assert "broken.pdf" in rows.nth(1).locator(".file-status").inner_text()  # the engine's reason names the file
    assert rows.nth(0).locator("progress").evaluate("p => p.value") == 1
    expect(page.locator("#index-select option[value=uploads]")).to_have_count(1)  # the new index is listed

    page.check('input[name="upload-target"][value="store"]')
    expect(page.locator("#upload-store option", has_text=store)).to_have_count(1)
    page.select_option("#upload-store", store)
    page.set_input_files("#upload-files", [str(good), str(broken)])
    page.click("#upload-form button[type=submit]")
    expect(rows.nth(2).locator(".file-status")).to_have_text(f"completed: in {store}")
    expect(rows.nth(3).locator(".file-status")).to_contain_text("failed: ")
    listed = admin(engine.base, "GET", f"/v1/vector_stores/{store}/files").json()["data"]
    assert [f["status"] for f in listed] == ["completed"]
    # the browser logs the one refusal it was sent (the broken PDF into the index), and nothing else
    assert page.watch.console_errors() == ["Failed to load resource: the server responded with a status of 422 "
                                           "(Unprocessable Entity)"], page.watch.console


def test_a_reader_sees_no_admin_action_and_no_hidden_index(engine, page):
    sign_in(page, engine.base, READER)
    assert page.inner_text("#who") == "reader · read"
    assert page.locator("#index-select option").all_inner_texts() == ["handbook"]  # not secret, not uploads
    page.wait_for_selector("#doc-rows tr")
    assert page.is_hidden("#versions") and page.is_hidden("#admin-actions")
    assert page.is_hidden('[data-view="upload"]')
    assert page.is_hidden('[data-view="evaluation"]')  # listing runs is the write role's: a 403 for a reader
    for label in ("Re-index", "Roll back", "Export", "Delete index", "Upload"):
        assert page.get_by_role("button", name=label).count() == 0 or not page.get_by_role("button", name=label).is_visible()
    page.click('[data-view="search"]')
    page.fill("#search-query", "the admins' own notes")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-rows tr")
    assert "admins' own notes" not in page.inner_text("#search-rows")
    assert page.watch.console_errors() == [], page.watch.console


def test_admin_actions_each_ask_first_and_work(engine, page):
    admin(engine.base, "POST", "/index", json={"index_name": "scratch", "documents": [
        {"doc_id": "a", "text": "Scratch notes about the pump."}, {"doc_id": "b", "text": "More scratch notes."}]})
    sign_in(page, engine.base, ADMIN)
    page.select_option("#index-select", "scratch")
    expect(page.locator("#version-rows tr")).to_have_count(1)

    page.click("#act-delete")  # cancelled: nothing happens
    expect(page.locator("#confirm")).to_be_visible()
    assert page.is_disabled("#confirm-ok")  # deleting needs the index's name typed
    page.click("#confirm-cancel")
    assert "scratch" in admin(engine.base, "GET", "/indexes").json()

    page.click("#act-reindex")
    page.click("#confirm-ok")
    expect(page.locator("#version-rows tr")).to_have_count(2)
    expect(page.locator("#versions-summary")).to_contain_text("Live: version 2", timeout=60_000)
    page.click("#act-rollback")
    page.click("#confirm-ok")
    expect(page.locator("#versions-summary")).to_contain_text("Live: version 1", timeout=60_000)

    page.click("#act-export")
    with page.expect_download() as download:
        page.click("#confirm-ok")
    assert download.value.suggested_filename == "scratch.ragx.gz"
    assert Path(download.value.path()).read_bytes()[:2] == b"\x1f\x8b"  # gzip

    page.click("#act-delete")
    page.fill("#confirm-typed", "scratch")
    page.click("#confirm-ok")
    expect(page.locator("#index-select option[value=scratch]")).to_have_count(0)
    assert "scratch" not in admin(engine.base, "GET", "/indexes").json()
    assert page.watch.console_errors() == [], page.watch.console


def test_a_wrong_or_revoked_key_gets_a_clear_sign_in_message(engine, page):
    page.goto(f"{engine.base}/ui/")
    expect(page.locator("#signin")).to_be_visible()  # auth on, no key: the form, without a request bound to fail
    assert not [u for u in page.watch.requests if "/whoami" in u]
    page.fill("#signin-key", "not-a-key-0123456789")
    page.click("#signin-form button[type=submit]")
    expect(page.locator("#signin-message")).to_have_text(
        "Your key was refused: it is wrong, expired or revoked. Sign in again.")
    assert page.evaluate("sessionStorage.length") == 0  # a refused key is not kept

    sign_in(page, engine.base, READER)
    original = engine.access_file.read_text()
    try:
        engine.access_file.write_text(json.dumps({"keys": [{**ACCESS["keys"][0], "key": "another-reader-key-0123456"}]}))
        page.click('[data-view="search"]')
        page.fill("#search-query", "pump")
        deadline = time.monotonic() + 10  # the engine re-reads the file within a second
        while page.is_hidden("#signin") and time.monotonic() < deadline:
            page.click("#search-form button[type=submit]")
            page.wait_for_timeout(300)
        expect(page.locator("#signin-message")).to_have_text(
            "Your key was refused: it is wrong, expired or revoked. Sign in again.")
        assert page.is_hidden("#app")
    finally:
        engine.access_file.write_text(original)
    # signed in again in the same page (the key restored): one click, one request, not one per sign-in
    deadline = time.monotonic() + 10  # the engine re-reads the restored file within a second or so
    while httpx.get(f"{engine.base}/whoami", headers={"Authorization": f"Bearer {READER}"}).status_code == 401:
        assert time.monotonic() < deadline, "the restored access file was not read again"
        time.sleep(0.2)
    page.fill("#signin-key", READER)
    page.click("#signin-form button[type=submit]")
    expect(page.locator("#app")).to_be_visible()
    page.click('[data-view="search"]')
    before = sum("/retrieve" in u for u in page.watch.requests)
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-rows tr")
    page.wait_for_timeout(300)
    assert sum("/retrieve" in u for u in page.watch.requests) == before + 1
    assert all(READER not in u for u in page.watch.requests)  # the key never travels in a URL
