"""The suite's own limits agree: pytest-timeout never cuts off a server start before the start's own
deadline reports it (with the server's log), even in a test that starts two engines one after the other
(a kill -9 and a restart) and its session fixtures' servers before them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.support.server import START_TIMEOUT_S

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_pytest_timeout_leaves_room_for_two_server_starts():
    timeout = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["timeout"]
    assert timeout >= 2 * START_TIMEOUT_S + 120, (timeout, START_TIMEOUT_S)
