"""`ragengine-operator`: run the RAGEngine operator against the current kubeconfig (or in-cluster).

`ragengine-operator sync-source [--stdin]` runs one source sync instead (sources/worker.py): what a
sync Job's container and the subprocess mode run. It imports neither kopf nor the Kubernetes client.
"""

from __future__ import annotations

import argparse
import logging
import sys


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ragengine-operator", description=__doc__)
    p.add_argument("-n", "--namespace", action="append", default=[],
                   help="watch this namespace (repeatable; globs like 'team-*' work); default: all namespaces")
    p.add_argument("--metrics-port", type=int, default=None, help="Prometheus /metrics port (0 = off)")
    p.add_argument("--liveness-port", type=int, default=None, help="liveness /healthz port (0 = off)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sync-source"]:
        from .sources.worker import main as sync_source

        return sync_source(argv[1:])
    from .settings import OperatorSettings

    args = parse_args(argv)
    overrides = {k: v for k, v in (("metrics_port", args.metrics_port), ("liveness_port", args.liveness_port)) if v is not None}
    settings = OperatorSettings(**overrides)
    if settings.sync_mode == "subprocess":
        from .syncer.in_subprocess import worker_missing

        # at once, not as every source's failure: git sources and documents would fail one by one
        if missing := worker_missing():
            print(f"ragengine-operator: sync_mode subprocess runs the sync worker beside the operator, and this "
                  f"installation lacks {', '.join(missing)}: install ragengine[operator,sync] and git, or use sync_mode "
                  "job (the Jobs run the ragengine-sync image; the operator image has no worker)", file=sys.stderr)
            return 2
    import kopf

    from .runtime import run

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.PLAIN)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    from . import handlers  # noqa: F401  (registers the handlers)

    return run(settings, args.namespace)


if __name__ == "__main__":
    sys.exit(main())
