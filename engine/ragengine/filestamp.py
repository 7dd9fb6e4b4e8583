"""``file_stamp(path)``: what tells that a watched file changed, without reading it.

Inode, size and modification time: a Kubernetes Secret or ConfigMap volume swaps a symlink to a new
directory, so the inode changes even when size and mtime do not. None when the file is not there. The
access file, the guardrails policy and the embedding file are each polled with it.
"""

from __future__ import annotations

import os
from pathlib import Path

Stamp = tuple[int, int, int]


def file_stamp(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
