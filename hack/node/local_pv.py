"""A small provisioner of `local` PersistentVolumes for the local cluster (its default StorageClass with the real node).

kube-controller-manager's hostpath provisioner makes root-owned 0750 directories, and fsGroup does not
apply to hostPath volumes, so a pod running as uid 1000 cannot write its claim. `local` volumes do get
fsGroup. This provisions claims of the StorageClass `ragengine-local` (WaitForFirstConsumer, provisioner
`ragengine.io/local-pv`): once the scheduler has picked the real node for a claim's pod, it makes a
directory under --dir and a `local` PV bound to that claim; when the claim is deleted (the PV is
Released), it deletes the PV and the directory. hack/node.sh starts it on the host and stops it by PID.

    python hack/node/local_pv.py --kubeconfig K --node NAME --dir DIR
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.rest import ApiException

CLASS = "ragengine-local"
PROVISIONER = "ragengine.io/local-pv"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
log = logging.getLogger("local-pv")


def pv_for(claim: client.V1PersistentVolumeClaim, node: str, path: Path) -> dict:
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"local-{claim.metadata.uid}", "labels": {"ragengine.io/local-pv": "true"},
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim.spec.resources.requests["storage"]},
            "accessModes": claim.spec.access_modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": CLASS,
            "volumeMode": "Filesystem",
            "claimRef": {"namespace": claim.metadata.namespace, "name": claim.metadata.name,
                         "uid": claim.metadata.uid},
            "local": {"path": str(path)},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


def provision(core: client.CoreV1Api, root: Path) -> None:
    for claim in core.list_persistent_volume_claim_for_all_namespaces().items:
        ann = claim.metadata.annotations or {}
        if claim.spec.storage_class_name != CLASS or claim.status.phase != "Pending" or claim.spec.volume_name:
            continue
        selected = ann.get(SELECTED_NODE)
        if not selected:
            continue  # not scheduled yet: WaitForFirstConsumer binds once the pod has a node
        # The class is the cluster's default with the real node: claims of pods on kwok's fake nodes get a
        # volume too (bound to that node; its directory here is never used, as their containers never run).
        path = root / claim.metadata.uid
        path.mkdir(parents=True, exist_ok=True)
        try:
            core.create_persistent_volume(pv_for(claim, selected, path))
            log.info("provisioned %s/%s at %s", claim.metadata.namespace, claim.metadata.name, path)
        except ApiException as exc:
            if exc.status != 409:
                raise


def reclaim(core: client.CoreV1Api, root: Path) -> None:
    for pv in core.list_persistent_volume(label_selector="ragengine.io/local-pv=true").items:
        if pv.status.phase not in ("Released", "Failed"):
            continue
        path = Path(pv.spec.local.path)
        if path.parent == root:
            shutil.rmtree(path, ignore_errors=True)
        try:
            core.delete_persistent_volume(pv.metadata.name)
            log.info("reclaimed %s", pv.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    core = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    args.dir.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            provision(core, args.dir)
            reclaim(core, args.dir)
        except Exception as exc:  # the API server restarting, say: log and go on
            log.warning("pass failed: %s", exc)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
