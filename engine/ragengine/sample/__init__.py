"""The bundled 'sample' index: a few Markdown pages about ragengine, loaded by ``make run``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragengine.index.api import IndexAPI

SAMPLE_INDEX = "sample"


def sample_documents() -> list[dict]:
    docs = []
    for path in sorted(Path(__file__).parent.glob("*.md")):
        docs.append({"doc_id": f"sample/{path.name}", "text": path.read_text(encoding="utf-8"),
                     "metadata": {"source": f"ragengine/sample/{path.name}", "title": path.stem.replace("-", " ")}})
    return docs


async def load_sample_index(registry: IndexAPI) -> None:
    await registry.add_documents(SAMPLE_INDEX, sample_documents())
