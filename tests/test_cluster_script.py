"""``hack/cluster.sh status`` reports a component whose recorded PID is gone as stopped, quietly: a PID file
left by a machine's restart or a killed run is a normal state, not an error for bash to print."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pid_of_a_finished_process() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_status_says_stopped_for_a_gone_pid_and_prints_nothing_on_stderr(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    gone = _pid_of_a_finished_process()
    for component in ("etcd", "kube-apiserver", "kubelet"):
        (run / f"{component}.pid").write_text(f"{gone}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAGENGINE_CLUSTER_DIR": str(tmp_path)}
    status = subprocess.run(["bash", str(ROOT / "hack/cluster.sh"), "status"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "etcd: stopped" in status.stdout and "kubelet: stopped" in status.stdout, status.stdout
    assert status.stderr == "", status.stderr
