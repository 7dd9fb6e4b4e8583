"""What keeps a parser child (``worker.py``) away from the engine, unprivileged: Linux only, each measure where
the kernel (and the container runtime's seccomp profile) allows it. Called by the child before it reads the
file; ``undumpable`` by the engine process itself, at start.

- ``undumpable()`` (the engine): ``prctl(PR_SET_DUMPABLE, 0)``. The kernel then owns the process's
  ``/proc/<pid>`` files and refuses ``environ``, ``mem``, ``maps`` and ptrace to every process without
  ``CAP_SYS_PTRACE``, the same uid included: a parser child can no longer read the admin key or the database
  URL from ``/proc/<ppid>/environ``. Side effects: no core dumps; py-spy and gdb need ``CAP_SYS_PTRACE``;
  the process's own ``/proc/self`` works as before; children are dumpable again after ``exec``.
- ``confine(writable)`` (the child):
  - capabilities dropped, when it has any (an engine run as root): the bounding set and the sets, so
    neither it nor a program it runs (Tesseract) has ``CAP_SYS_PTRACE`` or ``CAP_DAC_OVERRIDE``;
  - ``no_new_privs``, then Landlock: files only under the system's library and program folders, Python's
    and the code's folders (read and execute) and ``writable`` (the child's own temporary folder): not the
    data folder, the access and policy files, ServiceAccount tokens or other temporary files; no TCP bind or
    connect (ABI 4); no signals to, nor abstract sockets of, processes outside it (ABI 6), the engine
    included. Landlock also refuses a sandboxed process ptrace-class access (``/proc/<pid>/environ``) to
    processes outside its domain;
  - a seccomp filter: ``socket()`` (every family: TCP, UDP, raw, netlink, Unix) and ``io_uring_setup`` fail
    with ``EACCES``; a system call of another architecture kills it.

``confine`` returns what it applied (``{"capabilities": ..., "landlock": <ABI or None>, "seccomp": ...}``):
the parent logs what a kernel could not give (docs/documents.md says what each measure needs).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys
from pathlib import Path
from typing import Any

PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 4, 38, 22, 24, 47
SECCOMP_MODE_FILTER = 2
# x86_64 / aarch64: (audit arch, capset, socket, io_uring_setup); Landlock's calls are 444-446 on both
ARCH = {"x86_64": (0xC000003E, 126, 41, 425), "aarch64": (0xC00000B7, 91, 198, 425)}
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # what a rule on a file may hold
READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
NET_ALL = (1 << 0) | (1 << 1)  # bind and connect TCP
SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals
# Read (and execute) only: where programs, libraries and their data live. Of /etc only the loader's cache, the
# time zone, fonts and MIME types (Python's mimetypes, which the OOXML readers use): the access and guardrails
# files are mounted under /etc/ragengine.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt", "/etc/ld.so.cache", "/etc/localtime",
                "/etc/fonts", "/etc/mime.types")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")  # read and write

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


def undumpable() -> bool:
    """The calling process no longer dumpable (see the module's docstring); False where it cannot be."""
    return sys.platform == "linux" and _prctl(PR_SET_DUMPABLE, 0) == 0


def dumpable() -> bool:
    return sys.platform == "linux" and _libc.prctl(ctypes.c_int(3), 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _drop_capabilities(arch: tuple[int, int, int, int]) -> bool:
    """Empty the bounding set and the effective, permitted and inheritable sets (a no-op without any)."""
    status = Path("/proc/self/status").read_text()
    held = {line.split(":")[0]: int(line.split(":")[1], 16) for line in status.splitlines()
            if line.startswith(("CapEff", "CapPrm", "CapBnd"))}
    if not any(held.values()):
        return False
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)  # needs CAP_SETPCAP, held until the sets are emptied below
    _prctl(PR_CAP_AMBIENT, 4)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two zeroed __user_cap_data_struct
    if _libc.syscall(arch[1], ctypes.c_char_p(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    return True


def _landlock(paths_ro: list[str], writable: str | None) -> int | None:
    """Restrict the calling process to ``paths_ro`` (read and execute), ``DEVICES`` and ``writable``; no TCP, no
    signals or abstract sockets out of it. The ABI in force, or None where the kernel has no Landlock."""
    abi = _libc.syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # the ABI version
    if abi < 1:
        return None
    fs = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (
        FS_IOCTL_DEV if abi >= 5 else 0)
    attr = struct.pack("=QQQ", fs, NET_ALL if abi >= 4 else 0, SCOPE_ALL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = _libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr[:size]), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        return None
    try:
        rules = [(p, READ_ONLY) for p in paths_ro] + [(d, FS_READ_FILE | FS_WRITE_FILE) for d in DEVICES]
        rules += [(writable, fs)] if writable else []
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this system
            try:
                if not os.path.isdir(path):
                    rights &= FILE_RIGHTS  # a rule on a file holds file rights only
                rule = _PathBeneath(rights & fs, fd)
                if _libc.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                                 ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
            finally:
                os.close(fd)
        if _libc.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return int(abi)


def _seccomp(arch: tuple[int, int, int, int]) -> bool:
    audit, _capset, socket_nr, io_uring_nr = arch
    deny = 0x00050000 | errno.EACCES  # SECCOMP_RET_ERRNO
    program = [  # (code, jt, jf, k); jumps count the instructions skipped
        (0x20, 0, 0, 4),  # load seccomp_data.arch
        (0x15, 0, 6, audit),  # another architecture: kill
        (0x20, 0, 0, 0),  # load the call's number
        (0x35, 3, 0, 0x40000000),  # x32 calls: deny
        (0x15, 2, 0, socket_nr),
        (0x15, 1, 0, io_uring_nr),
        (0x06, 0, 0, 0x7FFF0000),  # allow
        (0x06, 0, 0, deny),
        (0x06, 0, 0, 0x80000000),  # SECCOMP_RET_KILL_PROCESS
    ]
    filters = b"".join(struct.pack("=HBBI", *op) for op in program)
    buf = ctypes.create_string_buffer(filters, len(filters))
    prog = struct.pack("@HP", len(program), ctypes.addressof(buf))
    return _libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                       ctypes.c_char_p(prog), 0, 0) == 0


def code_paths() -> list[str]:
    """Where the child's Python and code are read from: the interpreter's prefixes and the import path's
    folders (never ``/``: ``-m`` puts the working directory, ``/``, on it)."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent.parent), *sys.path}
    tess = os.environ.get("TESSDATA_PREFIX")
    if tess:
        found.add(tess)
    out = set()
    for p in found:
        if p and os.path.isabs(p) and os.path.exists(p):
            real = os.path.realpath(p)
            if real != "/":
                out.add(real)
                out.add(p)  # a symlinked venv: both the link's folder and its target
    return sorted(x for x in out if x != "/")


def confine(writable: str | None) -> dict[str, Any]:
    """Apply what this kernel allows to the calling process (a parser child), for the rest of its life."""
    arch = ARCH.get(platform.machine())
    if sys.platform != "linux" or arch is None:
        return {"capabilities": None, "landlock": None, "seccomp": False}
    dropped = _drop_capabilities(arch)
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return {"capabilities": dropped, "landlock": None, "seccomp": False}
    paths = code_paths() + [p for p in SYSTEM_PATHS if not any(p.startswith(c + "/") for c in code_paths())]
    paths.append(f"/proc/{os.getpid()}")  # its own /proc/self (libraries read it), nobody else's
    abi = _landlock(paths, writable)
    return {"capabilities": "dropped" if dropped else "none held", "landlock": abi, "seccomp": _seccomp(arch)}
