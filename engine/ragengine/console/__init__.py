"""The console: the engine's own web page (``/ui/``), as static files in this package, and the headers every
one of them is sent with. Pure: the route (``api/console.py``) serves what ``assets()`` lists.

No build step and no framework: a few ES modules and one stylesheet, loaded from the engine itself, so the
page works offline, behind the same access control, with nothing to deploy beside the engine. The page
holds no data: it reads the API with the key the user types (kept in the tab's sessionStorage), and
renders every document text and model output as text (``textContent``), never as HTML.

The Content-Security-Policy is what makes that safe by construction rather than by care: no inline
script and no inline style can run, nothing loads from or connects to another origin, and no other
site may frame the page (clickjacking). docs/console.md.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
PAGE = "index.html"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8"}

CSP = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data: blob:",
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
))
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-cache",  # revalidated every load (ETag): an upgraded engine's page is seen at once
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def _asset(body: bytes, suffix: str) -> Asset:
    return Asset(body, MEDIA_TYPES[suffix], f'"{hashlib.sha256(body).hexdigest()[:32]}"')


@functools.cache
def assets() -> dict[str, Asset]:
    """The console's scripts and stylesheet by name (``app.js``, ``console.css``, ...), read once."""
    return {path.name: _asset(path.read_bytes(), path.suffix) for path in sorted(HERE.iterdir())
            if path.suffix in (".js", ".css") and path.is_file()}


@functools.cache
def page(auth: bool) -> Asset:
    """The page, telling its script whether the engine requires a key: with none stored it then shows the
    sign-in form at once, instead of sending a request bound to fail (a 401 in the browser's error log)."""
    body = (HERE / PAGE).read_bytes().replace(b"__AUTH__", b"required" if auth else b"off")
    return _asset(body, ".html")
