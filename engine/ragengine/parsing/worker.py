"""The child side of the bounded parser: ``python -m ragengine.parsing.worker``.

Reads one request from stdin (a JSON header line ``{"kind", "limits"}``, then the file's bytes),
confines itself (``confine.py``: no capabilities, Landlock, seccomp: no network, no file of the engine's
but its own temporary folder, ``$TMPDIR``) and sets its rlimits before touching the bytes, parses, and
writes one JSON object to stdout: ``{"parsed": {...}}`` or ``{"refused": reason, "over_limit": bool,
"code": code}``, with ``"confined"``: what the kernel allowed. The CPU-time limit is enforced by the kernel
(SIGXCPU, then SIGKILL a second later), so a parser stuck in C code stops too.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

from ragengine.parsing.confine import confine
from ragengine.parsing.limits import MEMORY, Parsed, ParseLimits, Refused

MIB = 1024 * 1024


def apply_limits(limits: ParseLimits) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * MIB, limits.memory_mb * MIB))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.memory_mb * MIB, limits.memory_mb * MIB))  # temp files
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU dumps core by default


def run(kind: str, data: bytes, limits: ParseLimits) -> Parsed | Refused:
    try:
        from ragengine.parsing import formats  # under the limits: its libraries count too

        return formats.parse(kind, data, limits)
    except MemoryError:
        return Refused(f"parsing needs more than {limits.memory_mb} MiB of memory (the limit)", over_limit=True,
                       code=MEMORY)
    except RecursionError:
        return Refused("could not be read: nested too deeply")
    except Exception as exc:  # hostile input raises anything; the reason names it
        if _caused_by(exc, MemoryError):  # libraries wrap it (pdfplumber's PdfminerException)
            return Refused(f"parsing needs more than {limits.memory_mb} MiB of memory (the limit)", over_limit=True,
                           code=MEMORY)
        return Refused(f"could not be read: {exc.__class__.__name__}: {str(exc)[:300]}")


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen) or len(seen) > 20:
            continue
        if isinstance(e, kind):
            return True
        seen.append(e)
        todo += [e.__cause__, e.__context__] + [a for a in e.args if isinstance(a, BaseException)]
    return False


def prepare(header: dict) -> tuple[ParseLimits, dict[str, Any]]:
    """Before the file's bytes: confined (its temporary folder, ``$TMPDIR``, the only one it may write), then
    limited. What a parser child runs first; the sandbox's tests run it too."""
    confined = confine(os.environ.get("TMPDIR"))
    limits = ParseLimits.from_dict(header["limits"])
    apply_limits(limits)
    return limits, confined


def main() -> None:
    header = json.loads(sys.stdin.buffer.readline())
    limits, confined = prepare(header)
    data = sys.stdin.buffer.read()
    result = run(str(header["kind"]), data, limits)
    del data
    out: dict[str, object]
    if isinstance(result, Parsed):
        out = {"parsed": result.to_dict()}
    else:
        out = {"refused": result.reason, "over_limit": result.over_limit, "code": result.code}
    out["confined"] = confined
    sys.stdout.write(json.dumps(out, ensure_ascii=False))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
