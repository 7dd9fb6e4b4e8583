"""The console is safe by construction and usable by anyone: markup in documents and answers runs nothing, a
strict Content-Security-Policy holds, nothing loads from another origin, every action is reachable from the
keyboard, the engine's outcomes (no context, guardrails) are shown as such, and an answer cut off mid-stream
says so without hanging."""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import expect

from ragengine import console
from ragengine.console import CSP
from tests.console.conftest import ADMIN, HOSTILE, admin, released, sign_in
from tests.console.proxy import cuttable

MARKUP = "<img src=x onerror=\"window.__pwned='answer'\"><script>window.__pwned='answer-script'</script>"


def test_the_console_is_served_with_a_strict_policy_and_stays_small(engine):
    page = httpx.get(f"{engine.base}/ui/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CSP
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                      "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"):
        assert directive in CSP
    assert "unsafe" not in CSP and "*" not in CSP
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    assert '<meta name="ragengine-auth" content="required">' in page.text
    assert "<script>" not in page.text and " style=" not in page.text  # no inline script or style
    loaded = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert loaded[:3] == ["data:,", "assets/console.css", "assets/app.js"], loaded
    assert all(u.startswith("assets/") for u in loaded[1:])  # everything from the engine itself
    redirect = httpx.get(f"{engine.base}/ui")
    assert redirect.status_code == 307 and redirect.headers["location"] == "ui/"  # relative: a path prefix is kept
    total = 0
    for name in console.assets():
        asset = httpx.get(f"{engine.base}/ui/assets/{name}")  # open: the files hold no data
        assert asset.status_code == 200 and asset.headers["content-security-policy"] == CSP
        again = httpx.get(f"{engine.base}/ui/assets/{name}", headers={"If-None-Match": asset.headers["etag"]})
        assert again.status_code == 304
        total += len(asset.content)
    assert total <= 250_000, total  # the budget for the JavaScript and CSS sent
    missing = httpx.get(f"{engine.base}/ui/assets/nope.js")
    assert missing.status_code == 404 and missing.json()["detail"] == "No such console file: 'nope.js'."
    # only one level below /ui/assets/ is open: nothing else is reached around the key
    assert httpx.get(f"{engine.base}/ui/assets/x/../../indexes").status_code in (401, 404)
    assert httpx.get(f"{engine.base}/whoami").status_code == 401


def test_a_hostile_document_and_answer_run_nothing_and_load_nothing(engine, page):
    admin(engine.base, "POST", "/index", json={"index_name": "hostile", "documents": [HOSTILE]})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    sign_in(page, engine.base, ADMIN)
    page.select_option("#index-select", "hostile")
    expect(page.locator("#doc-rows")).to_contain_text("<script>window.__pwned='script'</script>")  # shown as text
    page.locator("#doc-rows button").first.click()  # the document: its id and metadata are markup too
    expect(page.locator("#chunk-meta")).to_contain_text("<svg onload=window.__pwned='meta'>.pdf")
    page.click("#chunk-close")

    page.click('[data-view="search"]')
    page.fill("#search-query", "pump safety valve")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#search-rows")).to_contain_text("onerror=")

    page.click('[data-view="chat"]')
    engine.llm.reply = MARKUP
    engine.llm.split = lambda text: [text[i:i + 7] for i in range(0, len(text), 7)]  # markup cut across deltas
    page.fill("#chat-input", "What about pump safety?")
    page.click("#chat-send")
    expect(page.locator(".msg.assistant .text")).to_have_text(MARKUP)
    page.locator(".citations button").first.click()
    expect(page.locator("#chunk-title")).to_have_text("<svg onload=window.__pwned='meta'>.pdf")
    expect(page.locator("#chunk-doc")).to_contain_text("never open valve V-9")
    page.mouse.move(200, 200)  # hover whatever is there

    assert page.evaluate("window.__pwned") is None
    assert page.evaluate("document.querySelectorAll('img, svg:not(.chart), b, iframe').length") == 0
    assert page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))") == ["assets/app.js"]
    assert dialogs == []
    assert [u for u in page.watch.requests if urlsplit(u).netloc != urlsplit(engine.base).netloc
            and not u.startswith(("data:", "blob:"))] == []
    assert page.watch.console_errors() == [], page.watch.console


def test_the_policy_stops_a_script_that_got_into_the_page_anyway(engine, page):
    """Defence in depth: even markup inserted as HTML (a bug the console does not have) could not run script,
    and the page cannot be framed."""
    sign_in(page, engine.base, ADMIN)
    blocked = page.evaluate("""() => new Promise(resolve => {
        document.addEventListener('securitypolicyviolation', e => resolve(e.violatedDirective), {once: true});
        const s = document.createElement('script');
        s.textContent = "window.__inline = 1";
        document.body.append(s);
    })""")
    assert blocked.startswith("script-src") and page.evaluate("window.__inline") is None
    page.watch.console.clear()  # the violation's own report is what this test expects
    framed = page.evaluate("""base => new Promise(resolve => {
        const f = document.createElement('iframe');
        f.src = base + '/ui/';
        f.onload = () => { try { resolve(f.contentDocument?.querySelector('#app') ? 'framed' : 'blocked'); }
                           catch { resolve('blocked'); } };
        document.body.append(f);
        setTimeout(() => resolve('blocked'), 3000);
    })""", engine.base)
    assert framed == "blocked"
    page.watch.console.clear()


ACTIONS = """() => [...document.querySelectorAll('button, input, select, textarea, a[href]')]
    .filter(e => e.offsetParent !== null && !e.disabled && !(e.type === 'radio' && !e.checked))
    .map(e => e.id || e.dataset.view || (e.type === 'radio' ? e.name : e.textContent.trim()))"""
FOCUSED = """() => { const e = document.activeElement;
    return e.id || e.dataset.view || (e.type === 'radio' ? e.name : e.textContent.trim()); }"""


def tab_through(page, presses: int) -> set[str]:
    seen = set()
    for _ in range(presses):
        page.keyboard.press("Tab")
        seen.add(page.evaluate(FOCUSED))
    return seen


def test_keyboard_alone_reaches_every_action(engine, page):
    page.goto(f"{engine.base}/ui/")
    expect(page.locator("#signin-key")).to_be_focused()
    page.keyboard.type(ADMIN)
    page.keyboard.press("Enter")
    expect(page.locator("#app")).to_be_visible()
    page.select_option("#index-select", "handbook")
    page.wait_for_selector("#doc-rows tr")
    for view in ("indexes", "search", "chat", "upload"):
        page.focus(f'[data-view="{view}"]')
        page.keyboard.press("Enter")  # a section opens from the keyboard
        expect(page.locator(f"#view-{view}")).to_be_visible()
        if view == "search":
            page.focus("#search-query")
            page.keyboard.type("restart the pump")
            page.keyboard.press("Enter")
            page.wait_for_selector("#search-rows tr")
        if view == "chat":
            page.focus("#chat-input")
            page.keyboard.type("How do I restart the pump?")
            page.keyboard.press("Enter")
            page.wait_for_selector(".citations button")
        page.focus("#sign-out")
        actions = set(page.evaluate(ACTIONS))
        reached = tab_through(page, len(actions) + 5)
        assert actions <= reached, (view, actions - reached)
    # a citation opens and closes from the keyboard
    page.click('[data-view="chat"]')
    page.focus(".citations button")
    page.keyboard.press("Enter")
    expect(page.locator("#chunk")).to_be_visible()
    expect(page.locator("#chunk-close")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#chunk")).to_be_hidden()
    assert page.watch.console_errors() == [], page.watch.console


def test_no_context_and_guardrail_actions_are_shown_as_such(engine, page):
    sign_in(page, engine.base, ADMIN)
    page.select_option("#index-select", "handbook")
    page.click('[data-view="chat"]')
    page.fill("#chat-input", "zyxwv qqq")  # nothing in the handbook comes near: below the threshold
    page.click("#chat-send")
    expect(page.locator(".msg.assistant .no-context")).to_have_text(
        "No document matched this question closely enough: this answer is not based on the index.")
    expect(page.locator(".msg.assistant .text")).to_contain_text("no document matched this question")  # the disclaimer
    assert page.locator(".msg.assistant .citations li").count() == 0

    page.click("#chat-new")
    engine.llm.reply = "Use the key AKIAABCDEFGHIJKLMNOP to restart the pump."
    page.fill("#chat-input", "How do I restart the pump?")
    page.click("#chat-send")
    expect(page.locator(".msg.assistant .notes")).to_contain_text("Guardrails: redacted by regex (redact ×1).")
    assert "AKIA" not in page.inner_text(".msg.assistant .text")
    assert "[REDACTED]" in page.inner_text(".msg.assistant .text")
    assert page.watch.console_errors() == [], page.watch.console


def test_the_engine_unreachable_mid_stream_cuts_the_answer_visibly_and_nothing_hangs(engine, page):
    engine.llm.reply = "First close valve V-7 and then press the green button for three seconds."
    engine.llm.stream_hold_after = 3
    with released(engine.llm), cuttable(engine.base) as (via, proxy):
        sign_in(page, via, ADMIN)
        page.select_option("#index-select", "handbook")
        page.click('[data-view="chat"]')
        page.fill("#chat-input", "How do I restart the pump?")
        page.click("#chat-send")
        expect(page.locator(".msg.assistant .text")).to_have_text(re.compile(r"^First close valve"))
        proxy.cut()
        expect(page.locator(".msg.assistant .notes")).to_have_text(
            "The answer was cut off: the connection to the engine was lost.")
        expect(page.locator(".msg.assistant")).to_have_class(re.compile(r"\bcut\b"))
        assert page.get_attribute(".msg.assistant", "aria-busy") is None
        expect(page.locator("#chat-send")).to_be_enabled()
        expect(page.locator("#chat-stop")).to_be_disabled()
        # the engine is gone: asking again fails at once, with words
        page.fill("#chat-input", "Are you there?")
        page.click("#chat-send")
        expect(page.locator(".msg.assistant").last.locator(".notes")).to_contain_text("No answer: The engine did not answer")
    page.watch.console.clear()  # the browser logs the lost connection and the refused one


def test_the_evaluation_view_draws_the_engines_own_runs(engine, page):
    """The Evaluation view draws what GET /indexes/{name}/evaluations answers (issue 40's API, served by this
    engine): the newest finished run of each version, its scores as bars and as a table."""
    golden = {"top_k": 3, "questions": [
        {"id": "restart", "question": "How do I restart the pump?", "relevant_doc_ids": ["pumps"]},
        {"id": "soup", "question": "When does the cafeteria serve soup?", "relevant_doc_ids": ["cafeteria"]}]}
    run_id = admin(engine.base, "POST", "/indexes/handbook/evaluations", json=golden).json()["id"]
    deadline = time.monotonic() + 60
    while (run := admin(engine.base, "GET", f"/indexes/handbook/evaluations/{run_id}").json())["status"] in (
            "queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run["status"] == "succeeded", run
    listed = admin(engine.base, "GET", "/indexes/handbook/evaluations").json()["data"]
    versions = sorted({r["version"] for r in listed if r["status"] == "succeeded"})
    assert run["version"] in versions

    sign_in(page, engine.base, ADMIN)
    assert httpx.get(f"{engine.base}/whoami", headers={"Authorization": f"Bearer {ADMIN}"}).json()["features"] == {
        "llm": True, "evaluations": True}
    page.select_option("#index-select", "handbook")
    page.click('[data-view="evaluation"]')
    expect(page.locator("#eval-rows tr")).to_have_count(len(versions))
    names = page.locator("#eval-head th").all_inner_texts()
    assert names[0] == "Version" and "mrr@3" in names, names
    row = page.locator("#eval-rows tr").nth(versions.index(run["version"])).locator("td").all_inner_texts()
    assert row[0] == str(run["version"])
    assert row[names.index("mrr@3")] == f"{run['metrics']['mrr@3']:.3f}", (row, run["metrics"])
    assert page.locator("#eval-chart svg rect").count() == len(versions) * (len(names) - 1)
    assert page.watch.console_errors() == [], page.watch.console


def test_console_enabled_false_serves_no_page(tmp_path):
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.routes import operations

    off = operations(create_app(EngineSettings(console_enabled=False, data_dir=tmp_path)))
    on = operations(create_app(EngineSettings(data_dir=tmp_path)))
    assert on - off == {("get", "/ui"), ("get", "/ui/"), ("get", "/ui/assets/{name}")}
    assert ("get", "/whoami") in off  # an API route: clients other than the console use it too


def test_every_console_file_ships_as_package_data():
    """The engine image installs the package (not the source tree): each file of the console must match
    pyproject's package-data, or the image would serve a page without its scripts."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    files = [p.name for p in console.HERE.iterdir() if p.suffix != ".py" and p.is_file()]
    assert {"index.html", "app.js", "console.css"} <= set(files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)] == []
