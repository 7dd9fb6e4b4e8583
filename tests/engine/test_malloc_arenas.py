"""`ragengine serve` limits glibc's malloc arenas before its threads start (cli/malloc.py, issue 45): threads
that allocate at once share two arenas instead of one each. Counted by glibc itself (malloc_info)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# Six threads allocate at the same time, then glibc lists its arenas (one <heap nr=...> each).
PROBE = textwrap.dedent("""
    import ctypes, sys, threading
    from ragengine.cli.malloc import limit_arenas
    print("limited" if (sys.argv[1] == "limit" and limit_arenas()) else "default", flush=True)
    barrier = threading.Barrier(6)
    def work():
        barrier.wait()
        keep = [bytearray(4096) for _ in range(2000)]
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads: t.start()
    for t in threads: t.join()
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    out = libc.fdopen(1, b"w")
    libc.malloc_info(0, ctypes.c_void_p(out))
    libc.fflush(ctypes.c_void_p(out))
""")


def arenas(mode: str, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True,
                         env=environ).stdout
    return out.splitlines()[0], out.count("<heap nr=")


def test_threads_share_two_arenas_once_limited():
    assert arenas("default")[1] > 2  # glibc's own default: an arena per thread here
    assert arenas("limit") == ("limited", 2)


def test_malloc_arena_max_in_the_environment_wins():
    assert arenas("limit", MALLOC_ARENA_MAX="4") == ("default", 4)
