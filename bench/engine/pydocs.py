"""The side-by-side benchmarks' corpus: passages of Python's own documentation and the questions of its FAQ.

Read from the reST sources that Debian's ``python3.11-doc`` package installs (``apt-get install -y
python3.11-doc``; nothing is downloaded here). The documents are cut at their section headings into
passages of at most ``MAX_WORDS`` words (longer sections at paragraph boundaries), the FAQ's first, so every
FAQ answer is in the index; then the other documents in path order until ``n`` passages. The questions are
the FAQ's headings that end with a question mark (176 in 3.11).
"""

from __future__ import annotations

import re
from pathlib import Path

SOURCES = Path("/usr/share/doc/python3.11/html/_sources")
MAX_WORDS = 600  # about 800 MiniLM tokens: three to four chunks of the engine's 256
MIN_WORDS = 40
_UNDERLINE = re.compile(r"^([=\-~^\"'*+#])\1{2,}$")


class Missing(RuntimeError):
    pass


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) pairs of a reST document."""
    lines = text.splitlines()
    out: list[tuple[str, list[str]]] = [("", [])]
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and _UNDERLINE.match(lines[i + 1].strip()) \
                and len(lines[i + 1].strip()) >= len(line.strip()) - 2:
            out.append((line.strip(), []))
            i += 2
            continue
        if not _UNDERLINE.match(line.strip()):
            out[-1][1].append(line)
        i += 1
    return [(heading, "\n".join(body).strip()) for heading, body in out]


def _passages(heading: str, body: str) -> list[str]:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    out, current, words = [], [heading] if heading else [], 0
    for paragraph in paragraphs:
        n = len(paragraph.split())
        if words and words + n > MAX_WORDS:
            out.append("\n\n".join(current))
            current, words = [heading] if heading else [], 0
        current.append(paragraph)
        words += n
    if words:
        out.append("\n\n".join(current))
    return [p for p in out if len(p.split()) >= MIN_WORDS]


def python_docs(n: int = 1000, root: Path = SOURCES) -> tuple[list[str], list[str]]:
    """``n`` passages and the FAQ's questions."""
    if not root.is_dir():
        raise Missing(f"{root} missing: apt-get install -y python3.11-doc")
    files = sorted(root.rglob("*.rst.txt"))
    faq = [f for f in files if f.parent.name == "faq"]
    passages: list[str] = []
    questions: list[str] = []
    for path in faq + [f for f in files if f not in faq]:
        for heading, body in _sections(path.read_text(encoding="utf-8", errors="replace")):
            if path in faq and heading.endswith("?"):
                questions.append(heading)
            passages.extend(_passages(heading, body))
            if len(passages) >= n and path not in faq:
                return passages[:n], questions
    return passages[:n], questions
