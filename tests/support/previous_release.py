"""The previous release, pinned in hack/previous-release.env (moved forward at each release): its commit."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = dict(
    line.split("=", 1) for line in (ROOT / "hack" / "previous-release.env").read_text().split() if "=" in line
)["PREVIOUS_RELEASE"]
