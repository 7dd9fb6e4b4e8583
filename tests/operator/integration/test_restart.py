"""An operator killed in the middle of a reconcile converges after a restart (the real console script)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import OPERATOR_ENV
from .kube import wait_for

ROOT = Path(__file__).resolve().parents[3]
SPEC = {"inference": {"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "storage": {"volume": {"size": "1Gi"}}}


def start_operator(ns: str, log: Path, **env: str) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("ragengine-operator")
    return subprocess.Popen([str(exe), "--namespace", ns], stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            env={**os.environ, **OPERATOR_ENV, **env}, cwd=ROOT)


def test_operator_killed_mid_reconcile_converges(kube, bare_namespace, tmp_path):
    ns, n = bare_namespace, "crash"
    log = tmp_path / "operator.log"
    # Fault injection: the process exits hard right after its 4th server-side apply (the generated API
    # keys of vLLM and of the engine, the model-cache PVC, the vLLM Deployment).
    first = start_operator(ns, log, RAGENGINE_OPERATOR_CRASH_AFTER_APPLIES="4")
    try:
        kube.create_rag(ns, n, SPEC)
        assert first.wait(timeout=60) == 17, log.read_text()[-3000:]
    finally:
        first.kill()
    # Half-done: the first two objects exist, the engine does not, and no status was written.
    assert kube.exists("PersistentVolumeClaim", ns, f"{n}-model-cache") and kube.exists("Deployment", ns, f"{n}-inference")
    assert not kube.exists("Deployment", ns, f"{n}-engine")
    assert not (kube.get_rag(ns, n).get("status") or {}).get("conditions")

    second = start_operator(ns, log)
    try:
        rag = kube.wait_ready(ns, n, timeout=60)
        assert kube.exists("Service", ns, n) and kube.exists("Deployment", ns, f"{n}-engine")
        assert rag["status"]["observedGeneration"] == rag["metadata"]["generation"]
        # deletion while the operator runs: no finalizer to wait for, the GC takes the children
        kube.delete_rag(ns, n)
        wait_for(lambda: not kube.exists("Deployment", ns, f"{n}-engine"), 60, "children collected")
    finally:
        second.send_signal(signal.SIGTERM)
        try:
            second.wait(timeout=20)
        except subprocess.TimeoutExpired:
            second.kill()
    assert "Traceback" not in log.read_text().split("fault injection")[-1], log.read_text()[-3000:]
