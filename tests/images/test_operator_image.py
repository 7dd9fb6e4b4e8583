"""The operator image (images/operator.Dockerfile) is the operator alone: kopf, the Kubernetes client and every
module the operator process imports, but no document parser and no git (those are the sync image's: the
operator schedules syncs and never fetches or parses a source), nor the engine's libraries. Without the worker
it refuses to run syncs as its own subprocesses, saying why, rather than failing each source. No cluster needed.
"""

from __future__ import annotations

import json
import subprocess
import uuid

from tests.support import podman

IMAGE = podman.local_image("operator")
OPERATOR = ("kopf", "kubernetes", "ragengine_operator.handlers", "ragengine_operator.runtime",
            "ragengine_operator.__main__", "ragengine_operator.syncer.runner")
ABSENT = ("docx", "pptx", "openpyxl", "pdfplumber", "pdfminer", "PIL", "lxml", "fastapi", "faiss")
PROBE = f"""
import importlib, json, shutil
out = {{"git": bool(shutil.which("git"))}}
for name in {OPERATOR + ABSENT!r}:
    try:
        importlib.import_module(name)
        out[name] = True
    except ImportError:
        out[name] = False
print(json.dumps(out))
"""


def test_the_operator_image_has_the_operator_and_neither_parsers_nor_git():
    podman.require_image(IMAGE)
    proc = subprocess.run([podman.PODMAN, "run", "--rm", "--read-only", "--entrypoint", "python3", IMAGE, "-c", PROBE],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert {k for k, v in found.items() if v} == set(OPERATOR), found


def test_the_operator_image_refuses_subprocess_syncs_at_start():
    podman.require_image(IMAGE)
    name = f"operator-image-{uuid.uuid4().hex[:8]}"
    try:  # an operator that starts instead (no cluster here) retries its start-up until the timeout
        proc = subprocess.run([podman.PODMAN, "run", "--rm", "--name", name, "--read-only",
                               "--env", "RAGENGINE_OPERATOR_SYNC_MODE=subprocess", IMAGE],
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the operator started in sync_mode subprocess: {podman.logs(name)[-2000:]}") from exc
    finally:
        podman.remove(name)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-2000:]
    assert "lacks pdfplumber, docx, pptx, openpyxl, git" in proc.stderr and "sync_mode job" in proc.stderr, proc.stderr
