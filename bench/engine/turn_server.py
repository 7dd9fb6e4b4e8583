"""``ragengine serve`` with the stage timers of ``turn_profile`` installed: the same command line, the same app,
wrapped in the ``Recorder``. At shutdown the records go to the JSON file named by ``RAGENGINE_TURN_PROFILE_OUT``.

    python -m bench.engine.turn_server serve --port 0 --data-dir DIR --llm-url URL ...
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.engine import turn_profile


class _Wrapped(turn_profile.Recorder):
    """The Recorder, answering attribute reads (``state``) as the app it wraps."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


def _write() -> None:
    if turn_profile.PROFILER is not None:
        turn_profile.PROFILER.dump_stats(os.environ["RAGENGINE_TURN_CPROFILE"])
    out = os.environ.get("RAGENGINE_TURN_PROFILE_OUT")
    if out:
        Path(out).write_text(json.dumps({"records": turn_profile.RECORDS, "calls": dict(turn_profile.CALLS),
                                         "missing": MISSING}))


def main() -> None:
    import ragengine.app
    from ragengine import cli

    if os.environ.get("RAGENGINE_TURN_CPROFILE"):  # where the event loop's time goes, function by function
        import cProfile

        turn_profile.PROFILER = cProfile.Profile()
    original = ragengine.app.create_app
    ragengine.app.create_app = lambda settings=None: _Wrapped(original(settings), on_shutdown=_write)  # type: ignore[assignment]
    cli.main(sys.argv[1:])


MISSING = turn_profile.install()

if __name__ == "__main__":
    main()
