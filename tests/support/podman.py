"""Run one container of a rendered pod spec with podman, as a kubelet would run it.

The operator's manifest builders render pod specs; ``run_args`` turns one container of such a spec into
``podman run`` arguments without rewriting it by hand: the image, command and args, environment (values,
and Secret references resolved from what the test gives), the pod's and container's security context
(user and group, read-only root, dropped capabilities, no privilege escalation), and its volumes (a host
directory for a claim, owned by the pod's fsGroup as the kubelet makes it; tmpfs for an emptyDir; a
read-only directory of its files for a ConfigMap). The
container's ports are published on loopback ports the test chooses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PODMAN = shutil.which("podman") or "podman"


def local_image(name: str) -> str:
    """``localhost/ragengine-<name>:$IMAGE_TAG`` (default dev): what `make images` built, under the tag it used
    (IMAGE_TAG=x tests a build without replacing the :dev images)."""
    return f"localhost/ragengine-{name}:{os.environ.get('IMAGE_TAG') or 'dev'}"


def require_image(ref: str) -> None:
    """Fail (never skip) when the image is not built: `make test` builds it first."""
    import pytest

    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run hack/install-system.sh (make install does)", pytrace=False)
    if subprocess.run([PODMAN, "image", "exists", ref]).returncode != 0:
        pytest.fail(f"image {ref} is not built: run `make images`", pytrace=False)


@dataclass
class Mounts:
    """Where a pod's volumes come from: claim name -> host directory (made and chowned by ``run_args``);
    ConfigMap name -> its data and binaryData (written into a fresh directory, mounted read-only, as the kubelet
    does)."""

    claims: Mapping[str, Path] = field(default_factory=dict)
    config_maps: Mapping[str, Mapping[str, str | bytes]] = field(default_factory=dict)


def _env_args(container: Mapping[str, Any], secrets: Mapping[tuple[str, str], str]) -> list[str]:
    args: list[str] = []
    for var in container.get("env", ()):
        if "value" in var:
            args += ["--env", f"{var['name']}={var['value']}"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            key = (ref["name"], ref["key"])
            if key not in secrets:
                if ref.get("optional"):
                    continue
                raise KeyError(f"the container needs Secret {key[0]} key {key[1]}: give it to run_args")
            args += ["--env", f"{var['name']}={secrets[key]}"]
        else:
            raise ValueError(f"env {var['name']}: only value and secretKeyRef are supported here")
    return args


def _security_args(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    psc, csc = pod.get("securityContext", {}), container.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
    args: list[str] = []
    if uid is not None:
        args += ["--user", f"{uid}:{gid}"]
        if psc.get("fsGroup") is not None:
            args += ["--group-add", str(psc["fsGroup"])]
    if csc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    for cap in csc.get("capabilities", {}).get("drop", ()):
        args += ["--cap-drop", cap]
    if csc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    return args


def _volume_args(pod: Mapping[str, Any], container: Mapping[str, Any], mounts: Mounts) -> list[str]:
    volumes = {v["name"]: v for v in pod.get("volumes", ())}
    fs_group = pod.get("securityContext", {}).get("fsGroup")
    args: list[str] = []
    for mount in container.get("volumeMounts", ()):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            args += ["--tmpfs", f"{mount['mountPath']}:rw,exec,mode=1777"]
        elif "persistentVolumeClaim" in volume:
            host = mounts.claims[volume["persistentVolumeClaim"]["claimName"]]
            host.mkdir(parents=True, exist_ok=True)
            if fs_group is not None:  # what the kubelet does for fsGroup: group-owned, group-writable, setgid
                os.chown(host, 0, fs_group)
                host.chmod(0o2775)
            args += ["--volume", f"{host}:{mount['mountPath']}:rw"]
        elif "configMap" in volume:
            name = volume["configMap"]["name"]
            if name not in mounts.config_maps:
                raise KeyError(f"the pod mounts ConfigMap {name}: give its data to run_args (Mounts.config_maps)")
            host = scratch_dir()
            for key, value in mounts.config_maps[name].items():
                if isinstance(value, bytes):
                    (host / key).write_bytes(value)
                else:
                    (host / key).write_text(value)
            host.chmod(0o755)
            args += ["--volume", f"{host}:{mount['mountPath']}:ro"]
        else:
            raise ValueError(f"volume {mount['name']}: only emptyDir, persistentVolumeClaim and configMap are "
                             "supported here")
    return args


def run_args(pod: Mapping[str, Any], container_name: str, *, name: str, ports: Mapping[int, int],
             secrets: Mapping[tuple[str, str], str] | None = None, mounts: Mounts | None = None,
             image: str | None = None, command: list[str] | None = None, detach: bool = True) -> list[str]:
    """``podman run`` arguments for ``container_name`` of pod spec ``pod``. ``ports``: containerPort ->
    loopback host port. ``image`` replaces the rendered image (a local build of the same image), ``command``
    the rendered command and args (to run a probe under the container's exact environment)."""
    container = next(c for c in pod["containers"] if c["name"] == container_name)
    # --passwd=false: podman would add a passwd entry for the user; the kubelet does not (an image without
    # one for the pod's uid must work without it: tests/images/test_vllm_user.py)
    args = [PODMAN, "run", "--detach" if detach else "--rm", "--passwd=false", "--name", name, "--stop-timeout",
            str(pod.get("terminationGracePeriodSeconds", 30))]
    for container_port, host_port in ports.items():
        args += ["--publish", f"127.0.0.1:{host_port}:{container_port}"]
    args += _env_args(container, secrets or {})
    args += _security_args(pod, container)
    args += _volume_args(pod, container, mounts or Mounts())
    args += ["--entrypoint", "[]"] if container.get("command") or command else []
    args.append(image or container["image"])
    args += command if command is not None else list(container.get("command", ())) + list(container.get("args", ()))
    return args


def remove(name: str) -> None:
    subprocess.run([PODMAN, "rm", "--force", "--time", "5", name], capture_output=True)


def logs(name: str) -> str:
    out = subprocess.run([PODMAN, "logs", name], capture_output=True, text=True)
    return out.stdout + out.stderr


def exec_(name: str, *cmd: str) -> str:
    return subprocess.run([PODMAN, "exec", name, *cmd], capture_output=True, text=True, check=True).stdout


def wait_http(url: str, timeout_s: float, container: str | None = None) -> None:
    """Wait until ``url`` answers 200, failing with the container's log when it does not in time."""
    import httpx

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            resp = httpx.get(url, timeout=2)
            if resp.status_code == 200:
                return
            last = f"{resp.status_code} {resp.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.25)
    raise AssertionError(f"{url} did not answer 200 in {timeout_s} s (last: {last})\n"
                         + (logs(container)[-3000:] if container else ""))


def scratch_dir() -> Path:
    """A fresh host directory for a claim a test does not look into afterwards."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="ragengine-claim-"))
