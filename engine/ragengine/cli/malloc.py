"""Fewer glibc malloc arenas for the engine's process (issue 45, its peak memory).

glibc gives each thread that allocates its own arena, up to eight per core, and memory freed in one arena is
not reused by another thread's: the engine's threads (the embedding streams, the server's thread pool, the
background loop) each kept their own high-water mark. Two arenas cut the side-by-side's peak RSS from 625 to
586 MiB at no measured cost in throughput (`python -m bench.bench_kaito --only ours`: 83.7 and 81.9 requests/s
at 16 clients, within run-to-run noise). ``MALLOC_ARENA_MAX`` in the environment, which glibc reads first,
is left to win.
"""

from __future__ import annotations

import ctypes
import os
import sys

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas from now on (call it before the process starts threads); False where
    the C library is not glibc on Linux or ``MALLOC_ARENA_MAX`` is set."""
    if sys.platform != "linux" or "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas) == 1)
