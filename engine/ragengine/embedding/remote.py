"""An OpenAI-compatible ``POST {base}/embeddings`` as an embedding backend (one call per batch)."""

from __future__ import annotations

import httpx
import numpy as np

from ragengine.errors import UpstreamError
from ragengine.redact import redact_text, redact_url


class RemoteBackend:
    name = "remote"
    tokenizer = None  # unknown: the Embedder estimates

    def __init__(self, base_url: str, model: str, api_key: str | None, batch_size: int, max_tokens: int,
                 timeout_s: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url
        self.model = model
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.dim = len(self._post(["dimension probe"])[0])

    def _post(self, texts: list[str]) -> list[list[float]]:
        try:
            resp = self._client.post("/embeddings", json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise UpstreamError(f"Embedding service at {redact_url(self.base_url)} unreachable: "
                                f"{redact_text(str(exc))}") from exc
        if resp.status_code != 200:
            raise UpstreamError(
                f"Embedding service answered {resp.status_code}: {resp.text[:300]}",
                status_code=resp.status_code if 400 <= resp.status_code < 500 else 502,
            )
        data = sorted(resp.json()["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in data]

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._post(texts[start : start + self.batch_size]))
        return np.asarray(out, dtype=np.float32)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.embed_documents(texts)

    def close(self) -> None:
        self._client.close()
