"""Source sync: 1,000 files synced the first time, then again after one file changed.

    .venv/bin/python -m bench.bench_sources            # 1,000 files in a git repository
    .venv/bin/python -m bench.bench_sources --quick    # 200 files
    .venv/bin/python -m bench.bench_sources --s3       # 1,000 objects in an S3 bucket (versitygw)

A real engine (FAISS, the packaged embedding model), the real sync code and a real git server
(``git http-backend``) or S3 server (versitygw, tests/support/s3_server.py). The second sync must cost in
proportion to the change, not to the repository or bucket: the table shows documents written, texts
embedded and (S3) objects read by each sync. Writes bench/results/sources.json (sources_s3.json).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import RESULTS, ROOT, write_result
from bench.engine.synth import passages
from tests.support.git_server import Repo, git_http_server
from tests.support.server import serve_app


def embedded(base: str) -> float:
    found = re.search(r'^ragengine_embedded_texts_total\{kind="documents"\} (\S+)$', httpx.get(f"{base}/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--s3", action="store_true", help="an S3 bucket instead of a git repository")
    args = parser.parse_args()
    n = 200 if args.quick else 1000
    if args.s3:
        return bench_s3(n)
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from ragengine_operator.sources.engine import EngineClient
    from ragengine_operator.sources.sync import fetch, sync_source
    from ragengine_operator.spec.sources import Source

    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "git").mkdir()
        repo = Repo(tmp / "git")
        texts = passages(n, words=(60, 120), seed=11)
        for i, text in enumerate(texts):
            repo.write(f"docs/section-{i // 100}/page-{i}.md", f"# Page {i}\n\n{text}\n")
        repo.commit("a thousand pages")
        app = create_app(EngineSettings(data_dir=tmp / "data"))
        with git_http_server(tmp / "git") as git_base, serve_app(app, timeout_s=600) as engine:
            source = Source.model_validate({"name": "bench", "git": {"url": f"{git_base}/docs.git"}})
            previous = None
            for label in ("first sync", "after one file changed"):
                if previous is not None:
                    repo.write("docs/section-0/page-0.md", "# Page 0\n\nRewritten: the engine now syncs from git.\n")
                    repo.commit("one change")
                client = EngineClient(engine)
                before, start = embedded(engine), time.perf_counter()
                result = sync_source(source, client, lambda p=previous: fetch(
                    source, cache=tmp / "cache", secret=None, previous_revision=p, previous_validators=None), previous)
                seconds = time.perf_counter() - start
                client.close()
                assert result.ok, result.message
                previous = result.revision
                rows.append({"sync": label, "files": n, "seconds": seconds, "written": result.written,
                             "texts_embedded": embedded(engine) - before})
                print(f"{label}: {seconds:.1f} s, {result.written} documents written, "
                      f"{rows[-1]['texts_embedded']:.0f} texts embedded ({result.message})", flush=True)
    print(f"\n| git sync of {n} files | seconds | documents written | texts embedded |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['sync']} | {r['seconds']:.1f} | {r['written']} | {r['texts_embedded']:.0f} |")
    out = RESULTS / "sources.json"
    write_result(out, rows, indent=1)
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


def bench_s3(n: int) -> int:
    from ragengine.app import create_app
    from ragengine.settings import EngineSettings
    from ragengine_operator.net.egress import EgressPolicy
    from ragengine_operator.sources.engine import EngineClient
    from ragengine_operator.sources.sync import FetchPolicy, fetch, sync_source
    from ragengine_operator.spec.sources import Source
    from tests.support.s3_server import s3_server

    loopback = FetchPolicy(egress=EgressPolicy.build(["127.0.0.1/32"]))  # the S3 server listens on 127.0.0.1

    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        app = create_app(EngineSettings(data_dir=tmp / "data"))
        with s3_server(tmp) as s3, serve_app(app, timeout_s=600) as engine:
            s3.make_bucket("bench")
            for i, text in enumerate(passages(n, words=(60, 120), seed=11)):
                s3.put("bench", f"docs/section-{i // 100}/page-{i}.md", f"# Page {i}\n\n{text}\n")
            source = Source.model_validate({"name": "bench", "s3": {"endpoint": s3.base, "bucket": "bench",
                                                                    "prefix": "docs/", "secretRef": {"name": "s3"}}})
            previous = None
            for label in ("first sync", "after one object changed"):
                if previous is not None:
                    s3.put("bench", "docs/section-0/page-0.md", "# Page 0\n\nRewritten: the engine now syncs from S3.\n")
                client = EngineClient(engine)
                before, reads, start = embedded(engine), len(s3.gets), time.perf_counter()
                result = sync_source(source, client, lambda p=previous, c=client: fetch(
                    source, cache=tmp / "cache", secret=s3.secret, previous_revision=p, previous_validators=None,
                    policy=loopback, held=lambda: c.documents_of("bench", "bench")), previous)
                seconds = time.perf_counter() - start
                client.close()
                assert result.ok, result.message
                previous = result.revision
                rows.append({"sync": label, "objects": n, "seconds": seconds, "written": result.written,
                             "objects_read": len(s3.gets) - reads, "texts_embedded": embedded(engine) - before})
                print(f"{label}: {seconds:.1f} s, {result.written} documents written, {rows[-1]['objects_read']} "
                      f"objects read, {rows[-1]['texts_embedded']:.0f} texts embedded ({result.message})", flush=True)
    print(f"\n| S3 sync of {n} objects | seconds | documents written | objects read | texts embedded |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['sync']} | {r['seconds']:.1f} | {r['written']} | {r['objects_read']} | {r['texts_embedded']:.0f} |")
    out = RESULTS / "sources_s3.json"
    write_result(out, rows, indent=1)
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
