"""A sync worker as a child process (``sync_mode: subprocess``; syncer/runner.py dispatches).

For an operator run outside the cluster (kwok's pods run no containers, so the tests use it). The
child is ``python -m ragengine_operator sync-source --stdin`` in a session of its own, with:

- an environment of WORKER_ENV only (no KUBECONFIG, no KUBERNETES_*, no token, none of the
  operator's settings) and a scratch HOME/TMPDIR deleted afterwards;
- rlimits set by the operator (prlimit) before the child has read a byte of input: address space
  (settings.sync_memory), CPU time (sync_cpu_seconds: SIGXCPU, then SIGKILL), file size
  (sync_tmp_size); git inherits them;
- a wall-clock deadline (sync_deadline_seconds), after which the whole process group is killed.

The operator reads the inputs with its own identity (the source's Secret, the engine's key, the
ConfigMap) and writes them on stdin: this mode isolates the process, not the credentials.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import importlib.util
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace

from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.utils.quantity import parse_quantity

from ..kube import apply as kube
from ..kube.apply import api_message
from ..manifests.labels import Owner
from ..sources.protocol import Inputs, Limits, Prepared, SyncRequest, decode_result, failed, result_from_exit
from ..sources.sync import SyncResult

# The environment a worker keeps: how to find programs and modules, the locale, TLS roots, proxies.
WORKER_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY",
              "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")


# What a worker needs beside the operator's own packages: the `documents` parsers (the `sync` extra) and git.
# The operator's image has none of them (the sync Jobs run images/sync.Dockerfile's image).
WORKER_MODULES = ("pdfplumber", "docx", "pptx", "openpyxl")


def worker_missing() -> list[str]:
    """What this installation lacks to run a worker as a subprocess (empty: nothing)."""
    missing = [m for m in WORKER_MODULES if importlib.util.find_spec(m) is None]
    return missing + ([] if shutil.which("git") else ["git"])


def worker_env(home: str) -> dict[str, str]:
    """A worker's whole environment: nothing of the operator's but WORKER_ENV."""
    env = {k: os.environ[k] for k in WORKER_ENV if k in os.environ}
    env.update(HOME=home, TMPDIR=home, PYTHONDONTWRITEBYTECODE="1")
    return env


def set_limits(pid: int, memory: int, cpu_seconds: int, file_size: int) -> None:
    resource.prlimit(pid, resource.RLIMIT_AS, (memory, memory))
    resource.prlimit(pid, resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (file_size, file_size))


def kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)  # the worker and its git children (start_new_session)


class SubprocessRunner:
    def __init__(self, dyn: DynamicClient, limits: Limits, tmp_size: str) -> None:
        self.dyn, self.limits, self.tmp_size = dyn, limits, tmp_size

    async def run(self, owner: Owner, prepared: Prepared, progress: Callable[[str], None] | None) -> SyncResult:
        inputs = await asyncio.to_thread(self.inputs, owner.namespace, prepared)
        if isinstance(inputs, SyncResult):
            return inputs
        request = prepared.request
        if inputs.configmap is not None:  # the content read now: its own resourceVersion is the revision
            request = replace(request, configmap_revision=inputs.configmap.pop("resourceVersion"))
        with tempfile.TemporaryDirectory(prefix="ragengine-sync-") as home:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "ragengine_operator", "sync-source", "--stdin",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=worker_env(home), cwd=home, start_new_session=True)
            set_limits(proc.pid, int(parse_quantity(self.limits.memory)), self.limits.cpu_seconds,
                       int(parse_quantity(self.tmp_size)))
            try:
                assert proc.stdin is not None
                proc.stdin.write(inputs.payload(request))
                await proc.stdin.drain()
                proc.stdin.close()
                return await asyncio.wait_for(self.collect(proc, request, progress), self.limits.deadline_seconds)
            except TimeoutError:
                return failed(request, f"the sync did not finish within its deadline ({self.limits.deadline_seconds} s)")
            finally:
                if proc.returncode is None:
                    kill_group(proc.pid)
                    await proc.wait()

    async def collect(self, proc: asyncio.subprocess.Process, request: SyncRequest,
                      progress: Callable[[str], None] | None) -> SyncResult:
        assert proc.stdout is not None and proc.stderr is not None
        stderr: collections.deque[bytes] = collections.deque(maxlen=40)

        async def drain(stream: asyncio.StreamReader) -> None:
            async for line in stream:
                stderr.append(line)

        draining = asyncio.create_task(drain(proc.stderr))
        result = None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("PROGRESS ") and progress is not None:
                await asyncio.to_thread(progress, line[len("PROGRESS "):])
            elif line.startswith("RESULT "):
                result = decode_result(line[len("RESULT "):], request.urls)
        code = await proc.wait()
        await draining
        if result is not None:
            return result
        return result_from_exit(code, b"".join(stderr).decode("utf-8", "replace"), request, self.limits)

    def inputs(self, namespace: str, prepared: Prepared) -> Inputs | SyncResult:
        """What the worker gets on stdin, read with the operator's identity (this mode only)."""
        out = Inputs()
        try:
            if prepared.credentials:
                out.credentials = self._secret(namespace, prepared.credentials)
            if prepared.api_key:
                out.api_key = self._secret(namespace, prepared.api_key[0]).get(prepared.api_key[1])
                if not out.api_key:
                    return failed(prepared.request, f"the engine's API key (Secret {prepared.api_key[0]}, key "
                                                    f"{prepared.api_key[1]}) is empty")
            if prepared.configmap:
                obj = kube.get(self.dyn, "v1", "ConfigMap", namespace, prepared.configmap)
                if obj is None:
                    return failed(prepared.request, f"ConfigMap {prepared.configmap} not found in namespace {namespace}")
                out.configmap = {"data": obj.get("data"), "binaryData": obj.get("binaryData"),
                                 "resourceVersion": obj["metadata"]["resourceVersion"]}
        except LookupError as exc:
            return failed(prepared.request, str(exc.args[0]))
        return out

    def _secret(self, namespace: str, name: str) -> dict[str, str]:
        try:
            obj = kube.get(self.dyn, "v1", "Secret", namespace, name)
        except ApiException as exc:
            raise LookupError(f"Secret {name} cannot be read: {api_message(exc)}") from exc
        if obj is None:
            raise LookupError(f"Secret {name} not found in namespace {namespace}")
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
