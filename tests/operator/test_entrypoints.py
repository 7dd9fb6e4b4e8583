"""The console script's arguments and the child-event owner lookup (no cluster)."""

import pytest

from ragengine_operator import constants as c
from ragengine_operator import runtime
from ragengine_operator.__main__ import main, parse_args
from ragengine_operator.handlers import _owner
from ragengine_operator.settings import OperatorSettings
from ragengine_operator.syncer.in_subprocess import worker_missing


def test_parse_args():
    args = parse_args(["-n", "team-a", "--namespace", "ml-*", "--metrics-port", "0"])
    assert args.namespace == ["team-a", "ml-*"] and args.metrics_port == 0
    assert parse_args([]).namespace == []  # all namespaces


def test_settings_from_env(monkeypatch):
    monkeypatch.setenv("RAGENGINE_OPERATOR_ENGINE_IMAGE", "registry.local/engine:1")
    monkeypatch.setenv("RAGENGINE_OPERATOR_RESYNC_SECONDS", "7.5")
    s = OperatorSettings()
    assert s.engine_image == "registry.local/engine:1" and s.resync_seconds == 7.5


def test_owner_of_a_child():
    ref = {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": "docs", "uid": "u", "controller": True}
    assert _owner({"metadata": {"ownerReferences": [ref]}}) == "docs"
    assert _owner({"metadata": {"ownerReferences": [{**ref, "kind": "ReplicaSet"}]}}) is None
    assert _owner({"metadata": {}}) is None


def test_subprocess_syncs_without_the_worker_refuse_to_start(monkeypatch, tmp_path, capsys):
    """An operator installed without the sync worker (its image: no git, no parsers) in sync_mode subprocess
    says so at start instead of failing every git source and document later (tests/images checks the image)."""
    assert worker_missing() == []  # the test environment has the worker
    monkeypatch.setattr(runtime, "run", lambda *a: pytest.fail("the operator started"))
    monkeypatch.setenv("RAGENGINE_OPERATOR_SYNC_MODE", "subprocess")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "lacks git" in err and "ragengine[operator,sync]" in err and "sync_mode job" in err
