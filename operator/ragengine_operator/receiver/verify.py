"""Is a webhook request what its sender signed, and is it new? Pure (the clock is an argument).

Two signature schemes, both HMAC-SHA256 with the source's secret (the Secret's ``token``):

- ``github``: ``X-Hub-Signature-256: sha256=<hex HMAC of the body>``; the delivery id is
  ``X-GitHub-Delivery``. GitHub signs no time, so a replay is recognised by its delivery id alone.
- ``gitlab`` and ``generic``: the Standard Webhooks scheme (standardwebhooks.com), which GitLab's signing
  token uses: ``webhook-signature: v1,<base64 HMAC of "<webhook-id>.<webhook-timestamp>.<body>">`` (several
  space-separated signatures while a key rotates), ``webhook-id`` and ``webhook-timestamp`` (Unix seconds).
  A timestamp more than ``TOLERANCE_S`` from now is refused, so a captured request is worthless after it;
  within it the id is remembered. A key given as ``whsec_<base64>`` is that base64's bytes, as the
  specification's libraries read it; any other key is its UTF-8 bytes. GitLab's plain ``X-Gitlab-Token``
  (the secret itself in a header, no signature of the body) is not accepted.

Every comparison is constant-time. ``Replays`` remembers the delivery ids seen within the window (bounded:
the oldest go first), so the same delivery twice is refused and counted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

TOLERANCE_S = 300.0
REMEMBERED = 100_000  # delivery ids kept (GitHub's have no time: the oldest are forgotten first)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    outcome: str  # accepted, bad_signature, stale, replay: the metric's label
    reason: str
    delivery: str = ""


def _key(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret[len("whsec_"):], validate=True)
        except (binascii.Error, ValueError):
            pass
    return secret.encode("utf-8")


def sign_github(secret: str, body: bytes) -> str:
    """What GitHub sends in X-Hub-Signature-256 (for the tests and for users checking their setup)."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def sign_standard(secret: str, delivery: str, timestamp: int, body: bytes) -> str:
    """What a Standard Webhooks sender (GitLab's signing token) sends in webhook-signature."""
    mac = hmac.new(_key(secret), f"{delivery}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def verify(kind: str, secret: str, headers: Mapping[str, str], body: bytes, now: float) -> Verdict:
    """``headers``: lower-case names."""
    if kind == "github":
        delivery = headers.get("x-github-delivery", "")
        given = headers.get("x-hub-signature-256", "")
        if not given:
            return Verdict(False, "bad_signature", "no X-Hub-Signature-256 header: set the webhook's secret")
        if not hmac.compare_digest(given.encode(), sign_github(secret, body).encode()):
            return Verdict(False, "bad_signature", "X-Hub-Signature-256 does not match the body and the source's secret")
        if not delivery:
            return Verdict(False, "bad_signature", "no X-GitHub-Delivery header")
        return Verdict(True, "accepted", "", delivery)
    delivery, stamp, given = (headers.get("webhook-id", ""), headers.get("webhook-timestamp", ""),
                              headers.get("webhook-signature", ""))
    if not (delivery and stamp and given):
        return Verdict(False, "bad_signature", "a signed request has webhook-id, webhook-timestamp and "
                       "webhook-signature headers (GitLab: set a signing token, not a secret token)")
    try:
        when = int(stamp)
    except ValueError:
        return Verdict(False, "bad_signature", "webhook-timestamp is not a number of seconds")
    if abs(now - when) > TOLERANCE_S:
        return Verdict(False, "stale", f"webhook-timestamp is {int(now - when)} s from now (more than "
                       f"{int(TOLERANCE_S)} s): a replayed or delayed request")
    expected = sign_standard(secret, delivery, when, body).split(",", 1)[1].encode()
    for candidate in given.split():
        version, _, mac = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(mac.encode(), expected):
            return Verdict(True, "accepted", "", delivery)
    return Verdict(False, "bad_signature", "webhook-signature does not match the body and the source's secret")


class Replays:
    """Delivery ids seen, per source: the same delivery twice is a replay."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self.seen: OrderedDict[tuple[str, str], None] = OrderedDict()

    def first_time(self, source: str, delivery: str) -> bool:
        key = (source, delivery)
        if key in self.seen:
            self.seen.move_to_end(key)
            return False
        self.seen[key] = None
        while len(self.seen) > self.size:
            self.seen.popitem(last=False)
        return True

    def forget(self, source: str, delivery: str) -> None:
        """The delivery was not acted on: the sender's retry of it is welcome."""
        self.seen.pop((source, delivery), None)
