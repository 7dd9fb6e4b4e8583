"""The console's browser tests: a real engine (``create_app`` on uvicorn, the packaged embedding model, real
FAISS), the vLLM-like test LLM for streamed answers, and Debian's Chromium driven by Playwright's Python
package (its own driver, pointed at /usr/bin/chromium; never ``playwright install``).

One browser and one engine for the package (starting Chromium costs about a second, an engine a few); each test
gets a fresh browser context (its own sessionStorage, so its own sign-in) and a ``Watch`` of everything the
page did: console messages, uncaught errors, and every request's URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragengine.settings import EngineSettings
from tests.llm_server import FakeLLM, create_llm_app
from tests.support.embedding import serve_engine
from tests.support.server import serve_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What the machine's notes say Debian's Chromium needs here: no sandbox (root), and no background traffic
# (the closed network refuses it, many connections at a time).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
ADMIN = "console-admin-key-0123456789"
READER = "console-reader-key-0123456789"
ACCESS = {"keys": [{"name": "reader", "key": READER, "indexes": ["handbook"], "role": "read"}]}
POLICY = """
scanners:
  - type: regex
    action: redact
    patterns: ['\\bAKIA[0-9A-Z]{16}\\b']
"""
HANDBOOK = [
    {"doc_id": "pumps", "text": "# Pump maintenance\n\n## Restarting\n\nTo restart the pump, close valve V-7 first, "
     "then press the green button for three seconds.",
     "metadata": {"filename": "handbook.pdf", "page": 41, "title": "Plant handbook"}},
    {"doc_id": "launch", "text": "The launch plan: the pump panel moves to hall 2 in March.",
     "metadata": {"filename": "launch.pptx", "slide": 3}},
    {"doc_id": "cafeteria", "text": "The cafeteria serves soup on Tuesdays.", "metadata": {"filename": "notes.txt"}},
]
# Markup in a document's text, id and metadata, as an attacker who can write to an index would plant it.
HOSTILE = {"doc_id": "<img src=x onerror=window.__pwned='id'>",
           "text": "Pump safety: <script>window.__pwned='script'</script><img src=x onerror=\"window.__pwned='img'\"> "
                   "never open valve V-9 while the pump runs.",
           "metadata": {"filename": "<svg onload=window.__pwned='meta'>.pdf", "page": "<b onmouseover=alert(1)>2</b>"}}


def admin(base: str, method: str, path: str, **kwargs) -> httpx.Response:
    resp = httpx.request(method, base + path, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120, **kwargs)
    assert resp.status_code < 300, resp.text
    return resp


@dataclasses.dataclass
class Engine:
    base: str
    llm: FakeLLM
    access_file: Path


@pytest.fixture(scope="package")
def llm() -> Iterator[tuple[FakeLLM, str]]:
    fake = FakeLLM()
    with serve_app(create_llm_app(fake)) as base:
        yield fake, base


@pytest.fixture(scope="package")
def console_engine(embedder, llm, tmp_path_factory) -> Iterator[Engine]:
    """An engine with a key for an admin and one for a reader of ``handbook`` only; index ``secret`` is the
    admin's alone. No context is disclaimed, and the output policy redacts AWS key ids."""
    from ragengine.app import create_app

    fake, llm_base = llm
    work = tmp_path_factory.mktemp("console")
    access_file = work / "access.yaml"
    access_file.write_text(json.dumps(ACCESS))
    policy = work / "guardrails.yaml"
    policy.write_text(POLICY)
    app = create_app(EngineSettings(api_key=ADMIN, access_file=access_file, data_dir=work / "data",
                                    llm_url=f"{llm_base}/v1", llm_retries=0, no_context="disclaim",
                                    guardrails_policy=policy))
    with serve_engine(app, embedder) as base:
        admin(base, "POST", "/index", json={"index_name": "handbook", "documents": HANDBOOK})
        admin(base, "POST", "/index", json={"index_name": "secret", "documents": [{"text": "The admins' own notes."}]})
        yield Engine(base, fake, access_file)


@pytest.fixture
def engine(console_engine: Engine) -> Engine:
    """The module's engine with its test LLM back to its defaults."""
    fake = console_engine.llm
    for f in dataclasses.fields(FakeLLM):
        if f.name not in ("requests", "stream_events", "fail_next", "_lock"):
            setattr(fake, f.name, f.default if f.default is not dataclasses.MISSING else f.default_factory())
    fake.reset()
    return console_engine


@pytest.fixture(scope="package")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@dataclasses.dataclass
class Watch:
    """What a page did: console messages (type, text), uncaught exceptions, and every request's URL."""

    console: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    requests: list[str] = dataclasses.field(default_factory=list)

    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind == "error"]


@pytest.fixture
def page(browser):
    """A fresh context (no stored key) and page; ``page.watch`` records what it does. Uncaught script errors
    and Content-Security-Policy violations fail every test."""
    from playwright.sync_api import expect

    context = browser.new_context(accept_downloads=True)
    context.set_default_timeout(15_000)  # a loaded 2-core machine: waits are generous, never sleeps
    expect.set_options(timeout=15_000)
    tab = context.new_page()
    watch = Watch()
    tab.on("console", lambda m: watch.console.append((m.type, m.text)))
    tab.on("pageerror", lambda e: watch.errors.append(str(e)))
    tab.on("request", lambda r: watch.requests.append(r.url))
    tab.watch = watch
    try:
        yield tab
        assert watch.errors == [], watch.errors
        assert not [t for t in watch.console_errors() if "Content Security Policy" in t], watch.console
    finally:
        context.close()


def sign_in(page, base: str, key: str) -> None:
    page.goto(f"{base}/ui")
    page.fill("#signin-key", key)
    page.click("#signin-form button[type=submit]")
    page.wait_for_selector("#app:not([hidden])")


@contextlib.contextmanager
def released(fake: FakeLLM) -> Iterator[None]:
    """Let a held stream (``stream_hold_after``) go on when the block ends, whatever happened in it."""
    try:
        yield
    finally:
        fake.stream_release.set()
