"""A real S3 server for the tests: versitygw (Apache 2.0) over a folder, on loopback, with one key pair.

versitygw is built from its Go module with the control plane's binaries (hack/control-plane/build.sh,
into the same cache); ``RAGENGINE_VERSITYGW`` names another binary. The tests write objects through the
S3 API itself (SigV4-signed with httpx-auth, the signer the sync uses), so ETags and listings are the
server's own.

    with s3_server(tmp_path) as s3:
        s3.make_bucket("docs"); s3.put("docs", "hr/pay.md", b"...")
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
from httpx_auth import AWS4Auth

ROOT = Path(__file__).resolve().parents[2]
ACCESS_KEY, SECRET_KEY = "AKIDRAGENGINETEST", "ragengine-test-secret-key"


def versitygw() -> Path:
    given = os.environ.get("RAGENGINE_VERSITYGW")
    if given:
        return Path(given)
    out = subprocess.run(["bash", str(ROOT / "hack" / "cluster.sh"), "env"], capture_output=True, text=True,
                         check=True).stdout
    return Path(out.split("PATH=")[1].split(":")[0]) / "versitygw"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    base: str
    http: httpx.Client
    log: Path  # versitygw's request log: "hh:mm:ss | vgw | 200 | 1ms | 127.0.0.1 | GET | /bucket/key | - | query"

    def _requests(self) -> list[tuple[str, str, str]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) >= 9 and cells[1] == "vgw":
                out.append((cells[5], cells[6].lstrip("/"), cells[8]))
        return out

    @property
    def gets(self) -> list[str]:
        """'bucket/key' of every object read so far (GetObject), in order."""
        return [path for method, path, query in self._requests()
                if method == "GET" and "/" in path.rstrip("/") and "list-type" not in query]

    @property
    def lists(self) -> list[str]:
        """The query of every listing (ListObjectsV2) so far."""
        return [query for method, _, query in self._requests() if method == "GET" and "list-type" in query]

    @property
    def secret(self) -> dict[str, str]:
        """What a source's Secret holds."""
        return {"accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY}

    def url(self, bucket: str, key: str = "") -> str:
        return f"{self.base}/{bucket}/{quote(key, safe='/~')}"

    def make_bucket(self, bucket: str) -> None:
        self.http.put(self.url(bucket)).raise_for_status()

    def put(self, bucket: str, key: str, data: bytes | str, metadata: dict[str, str] | None = None) -> str:
        body = data.encode() if isinstance(data, str) else data
        headers = {f"x-amz-meta-{k}": v for k, v in (metadata or {}).items()}
        resp = self.http.put(self.url(bucket, key), content=body, headers=headers)
        resp.raise_for_status()
        return resp.headers.get("etag", "").strip('"')

    def delete(self, bucket: str, key: str) -> None:
        self.http.delete(self.url(bucket, key)).raise_for_status()


@contextlib.contextmanager
def s3_server(folder: Path) -> Iterator[S3Server]:
    binary = versitygw()
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `hack/cluster.sh build` (it builds versitygw with the control "
                           "plane's binaries) or set RAGENGINE_VERSITYGW")
    root = folder / "s3-root"
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = (folder / "versitygw.log").open("wb")
    proc = subprocess.Popen([str(binary), "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--port",
                             f"127.0.0.1:{port}", "posix", str(root)], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    client = httpx.Client(auth=AWS4Auth(ACCESS_KEY, SECRET_KEY, "us-east-1", "s3"), timeout=30)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.get(f"{base}/").status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"versitygw did not start: {(folder / 'versitygw.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield S3Server(base, client, folder / "versitygw.log")
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
