"""The console on loopback: how soon the page is usable, and how fast a 20,000-document index's listing pages
and searches answer (server-side paging and search: GET /indexes/{name}/documents).

- ``interactive``: from navigation to the documents of the index listed (the signed-in tab: key in
  sessionStorage), in Debian's Chromium driven by Playwright; and the browser's own ``domInteractive``.
- ``listing``: the first, a middle and the last page; a search that matches 1% of the documents, one that
  matches none (a full scan), and one document by id, each over HTTP with the key (p50 / p99).
- ``assets``: bytes of JavaScript and CSS the page loads (the issue's budget: 250 KB uncompressed).

The index's 20,000 one-chunk documents get random unit vectors (no embedding: the listing is what is
measured). With ``--screenshots DIR`` it also writes the PNGs of docs/console.md (a small handbook index and
the tests' stand-in LLM, tests/llm_server).

    .venv/bin/python -m bench.bench_console [--docs 20000] [--rounds 30] [--screenshots docs/images]

Writes bench/results/console.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.common import RESULTS, load_embedder, pct, write_result

KEY = "bench-console-admin-key-0123456789"
WORDS = ["pump", "valve", "restart", "hall", "panel", "button", "green", "safety", "manual", "shift", "report",
         "plant", "filter", "motor", "sensor"]


def ms(values: list[float]) -> dict:
    return {"p50_ms": round(pct(values, 50) * 1000, 1), "p99_ms": round(pct(values, 99) * 1000, 1)}


async def build(data_dir: Path, embedder, n: int) -> None:
    from ragengine.settings import EngineSettings
    from ragengine.versions import build_registry

    registry = build_registry(EngineSettings(data_dir=data_dir), embedder)
    await registry.start()
    rng = np.random.default_rng(0)
    texts = [f"Document {i}: " + " ".join(rng.choice(WORDS, 60)) + (" needle" if i % 100 == 0 else "")
             for i in range(n)]
    vectors = rng.standard_normal((n, embedder.dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for start in range(0, n, 5000):
        await registry.add_precomputed("big", texts[start:start + 5000], vectors[start:start + 5000],
                                       [{"filename": f"doc-{i}.txt"} for i in range(start, min(n, start + 5000))])
    await registry.close()


def listing(base: str, rounds: int, n: int) -> dict:
    headers = {"Authorization": f"Bearer {KEY}"}
    first = httpx.get(f"{base}/indexes/big/documents", params={"limit": 1}, headers=headers).json()
    some_id = first["documents"][0]["doc_id"]
    cases = {
        "first page": {"limit": 20},
        "middle page": {"limit": 20, "offset": n // 2},
        "last page": {"limit": 20, "offset": n - 20},
        "search, 1% match": {"limit": 20, "search": "needle"},
        "search, no match (full scan)": {"limit": 20, "search": "zzzqx"},
        "one document by id": {"limit": 1, "doc_id": some_id},
    }
    out = {}
    with httpx.Client(headers=headers, timeout=60) as client:
        for name, params in cases.items():
            times = []
            for _ in range(rounds):
                t = time.perf_counter()
                resp = client.get(f"{base}/indexes/big/documents", params={"max_text_length": 240, **params})
                times.append(time.perf_counter() - t)
                assert resp.status_code == 200, resp.text
            out[name] = {**ms(times), "total_items": resp.json()["total_items"]}
    return out


def interactive(base: str, rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    from tests.console.conftest import CHROMIUM, FLAGS

    until_listed, in_page, dom, loaded = [], [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        for _ in range(rounds):
            context = browser.new_context()
            context.add_init_script(f"sessionStorage.setItem('ragengine.key', {json.dumps(KEY)})")  # a signed-in tab
            page = context.new_page()
            page.on("request", lambda r: loaded.append(r.url))
            t = time.perf_counter()
            page.goto(f"{base}/ui/")
            page.wait_for_selector("#doc-rows tr")
            until_listed.append(time.perf_counter() - t)
            in_page.append(page.evaluate("performance.now()") / 1000)  # from the navigation's start, in the page
            dom.append(page.evaluate("performance.getEntriesByType('navigation')[0].domInteractive") / 1000)
            assert page.inner_text("#doc-count").endswith(" document(s)"), page.inner_text("#doc-count")
            context.close()
        browser.close()
    assets = {u.rsplit("/", 1)[1] for u in loaded if "/ui/assets/" in u}
    return {"documents listed": ms(until_listed), "documents listed (page clock)": ms(in_page),
            "domInteractive": ms(dom), "files": sorted(assets)}


def asset_bytes() -> int:
    from ragengine import console

    return sum(len(a.body) for a in console.assets().values())


def screenshots(embedder, out: Path) -> None:
    """The PNGs of docs/console.md, palette-quantised (small in the repository)."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.console.conftest import CHROMIUM, FLAGS, HANDBOOK
    from tests.llm_server import FakeLLM, create_llm_app
    from tests.support.embedding import serve_engine
    from tests.support.server import serve_app

    llm = FakeLLM(reply="Close valve V-7 first, then press the green button for three seconds.",
                  split=lambda text: re.findall(r"\S+\s*", text))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, serve_app(create_llm_app(llm)) as llm_base:
        app = create_app(EngineSettings(api_key=KEY, data_dir=Path(tmp), llm_url=f"{llm_base}/v1"))
        with serve_engine(app, embedder) as base, sync_playwright() as pw:
            headers = {"Authorization": f"Bearer {KEY}"}
            httpx.post(f"{base}/index", json={"index_name": "handbook", "documents": HANDBOOK}, headers=headers,
                       timeout=120).raise_for_status()
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page(viewport={"width": 1100, "height": 640})
            page.goto(f"{base}/ui/")
            page.fill("#signin-key", KEY)
            page.click("#signin-form button[type=submit]")
            page.wait_for_selector("#doc-rows tr")
            shot(page, out / "console-indexes.png", Image)
            page.click('[data-view="search"]')
            page.fill("#search-query", "how do I restart the pump")
            page.click("#search-form button[type=submit]")
            page.wait_for_selector("#search-rows tr")
            shot(page, out / "console-search.png", Image)
            page.click('[data-view="chat"]')
            page.fill("#chat-input", "How do I restart the pump?")
            page.click("#chat-send")
            page.wait_for_selector(".citations button")
            page.locator(".citations button").first.click()
            page.wait_for_selector("#chunk[open]")
            page.wait_for_timeout(300)
            shot(page, out / "console-citation.png", Image)
            browser.close()


def shot(page, path: Path, image) -> None:
    page.evaluate("document.querySelector('#status').textContent = ''")
    page.screenshot(path=str(path))
    image.open(path).convert("RGB").quantize(colors=48).save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1024} KB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=30, help="requests per listing case")
    parser.add_argument("--loads", type=int, default=10, help="page loads measured")
    parser.add_argument("--screenshots", type=Path, help="write docs/console.md's screenshots here")
    parser.add_argument("--quick", action="store_true", help="2,000 documents, 10 rounds, 3 loads")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.rounds, args.loads = 2_000, 10, 3

    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from tests.support.embedding import serve_engine

    embedder = load_embedder()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        asyncio.run(build(data, embedder, args.docs))
        app = create_app(EngineSettings(api_key=KEY, data_dir=data))
        with serve_engine(app, embedder) as base:
            results = {"documents": args.docs, "listing": listing(base, args.rounds, args.docs),
                       "interactive": interactive(base, args.loads), "asset_bytes": asset_bytes()}
    if args.screenshots:
        screenshots(embedder, args.screenshots)
    embedder.close()
    write_result(RESULTS / "console.json", results)
    print(f"\nconsole, {args.docs:,} documents (2 shared cores; bench/results/console.json)\n")
    print("| what | p50 (ms) | p99 (ms) | matches |\n|---|---|---|---|")
    for name, row in results["listing"].items():
        print(f"| GET documents: {name} | {row['p50_ms']} | {row['p99_ms']} | {row['total_items']:,} |")
    for name in ("documents listed", "documents listed (page clock)", "domInteractive"):
        row = results["interactive"][name]
        print(f"| page load: {name} | {row['p50_ms']} | {row['p99_ms']} | |")
    print(f"\nJavaScript and CSS: {results['asset_bytes']:,} bytes in {len(results['interactive']['files'])} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
