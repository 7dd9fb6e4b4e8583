"""The README's Quick start examples, run as written against ``make run``'s configuration.

The curl commands and the SDK snippet are parsed out of README.md, so editing them there changes what runs here.
``make run`` (hack/run.sh) is ``ragengine serve --load-sample-index`` with SmolLM2 on a 2,048-token window
(``RAGENGINE_CONTEXT_WINDOW``), every other setting at its default (the similarity threshold 0.3 included);
without SmolLM2 answers are extractive. Each engine here is that: the packaged embedding model, the bundled
'sample' index, and as the LLM none (extractive), the test LLM server, or the real SmolLM2.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
from pathlib import Path

import httpx
import pytest

from ragengine.app import create_app
from ragengine.settings import EngineSettings
from tests.support.embedding import serve_engine

ROOT = Path(__file__).resolve().parents[2]
README_HOST = "localhost:8000"  # where the README's curl commands go
README_SDK_URL = "http://127.0.0.1:8000/v1"  # the SDK snippet's base_url
# What the chat examples must be grounded in: the sample page about the operator (engine/ragengine/sample/).
OPERATOR_PAGE = "ragengine/sample/operator.md"
OPERATOR_SENTENCE = "The ragengine operator watches `RAGEngine` resources."  # the page's first sentence
# The sentence of the page that best matches the question: what the extractive answer is made of.
EXTRACTED = "The operator creates an API key Secret and NetworkPolicies that limit who may reach the engine and vLLM."


def flat(text: str) -> str:
    return " ".join(text.split())  # the sample's sentences wrap over lines


def quick_start() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]


def readme_curls() -> list[str]:
    """The Quick start's curl commands, one string each (backslash continuations joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", quick_start(), re.S)
    lines = [ln.strip() for b in blocks for ln in b.replace("\\\n", " ").splitlines()]
    return [ln for ln in lines if ln.startswith("curl ")]


def readme_sdk() -> str:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", quick_start(), re.S) if "OpenAI(" in b]
    assert len(blocks) == 1, "the Quick start has one SDK example"
    return blocks[0]


def path_of(command: str) -> str:
    url = next(w for w in shlex.split(command) if w.startswith(README_HOST))
    return url[len(README_HOST):]


def run_curl(command: str, base: str, tmp_path: Path) -> tuple[dict[str, str], object]:
    """The README's command through the real curl, pointed at ``base``; its response headers and JSON body."""
    headers_file = tmp_path / "headers.txt"
    command = command.replace(README_HOST, base.removeprefix("http://"), 1)
    command = command.replace("curl ", f"curl --max-time 300 -D {shlex.quote(str(headers_file))} ", 1)
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=330)
    assert done.returncode == 0, done.stderr
    head = headers_file.read_text().splitlines()
    assert head[0].split()[1] == "200", head
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:] if ":" in ln)}
    return headers, json.loads(done.stdout)


def run_sdk(base: str) -> tuple[object, str]:
    """The README's SDK snippet with its base_url pointed at ``base``: the ``reply`` it made and what it printed."""
    code = readme_sdk()
    assert README_SDK_URL in code
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(README_SDK_URL, base + "/v1"), "README.md", "exec"), namespace)
    return namespace["reply"], printed.getvalue()


@contextlib.contextmanager
def make_run_engine(tmp: Path, embedder, llm_url: str | None):
    script = (ROOT / "hack/run.sh").read_text()
    assert "--load-sample-index" in script and "LLM_N_CTX:-2048" in script, "make run changed: update this test"
    settings = EngineSettings(data_dir=tmp, load_sample_index=True, llm_url=llm_url,
                              context_window=2048 if llm_url else None)
    with serve_engine(create_app(settings), embedder) as base:
        yield base


def check_examples(base: str, tmp_path: Path) -> list[dict]:
    """Runs every curl example and checks what it must show; returns the chat answers."""
    commands = readme_curls()
    assert sorted(path_of(c) for c in commands) == ["/indexes", "/retrieve", "/v1/chat/completions"], commands
    answers = []
    for command in commands:
        headers, body = run_curl(command, base, tmp_path)
        path = path_of(command)
        if path == "/indexes":
            assert body == ["sample"]
        elif path == "/retrieve":
            assert isinstance(body, dict)
            top = body["results"][0]
            assert top["metadata"]["source"] == "ragengine/sample/durability.md" and top["score"] >= 0.3, top
        else:
            assert isinstance(body, dict)
            assert headers["x-rag-outcome"] == "applied" and body["rag"]["applied"] is True, body["rag"]
            assert [s["metadata"]["source"] for s in body["source_nodes"]] == [OPERATOR_PAGE]
            answers.append(body)
    return answers


def test_readme_examples_without_an_llm_answer_from_the_sample(tmp_path, embedder):
    """``make run`` without SmolLM2: extractive answers, made of the sample's own sentences."""
    with make_run_engine(tmp_path, embedder, None) as base:
        (answer,) = check_examples(base, tmp_path)
        assert answer["generation_method"] == "extractive_fallback"
        assert EXTRACTED in flat(answer["choices"][0]["message"]["content"])
        reply, printed = run_sdk(base)
    assert reply.model_extra["rag"]["applied"] is True
    assert reply.model_extra["source_nodes"][0]["metadata"]["source"] == OPERATOR_PAGE
    assert EXTRACTED in flat(printed)


def test_readme_examples_on_the_test_llm_put_the_sample_in_the_prompt(tmp_path, embedder, llm_url, fake_llm):
    with make_run_engine(tmp_path, embedder, llm_url) as base:
        check_examples(base, tmp_path)
        assert OPERATOR_SENTENCE in fake_llm.last_chat()["messages"][0]["content"]
        reply, printed = run_sdk(base)
    assert reply.model_extra["rag"]["applied"] is True and reply.model_extra["generation_method"] == "llm"
    assert reply.model_extra["source_nodes"][0]["metadata"]["source"] == OPERATOR_PAGE
    assert OPERATOR_SENTENCE in fake_llm.last_chat()["messages"][0]["content"]
    assert printed == reply.choices[0].message.content + "\n"


@pytest.mark.llm
def test_readme_examples_on_smollm2_give_a_grounded_answer(tmp_path, embedder, smollm2_url):
    """The real model of ``make run``. The README's requests sample (no temperature), so their wording is not
    checked; the same question at temperature 0 must name what the sample page says the operator creates
    (no word of it is in the question)."""
    with make_run_engine(tmp_path, embedder, smollm2_url) as base:
        (answer,) = check_examples(base, tmp_path)
        assert answer["generation_method"] == "llm" and answer["choices"][0]["message"]["content"].strip()
        reply, _ = run_sdk(base)
        assert reply.model_extra["source_nodes"][0]["metadata"]["source"] == OPERATOR_PAGE
        (chat,) = [c for c in readme_curls() if path_of(c) == "/v1/chat/completions"]
        request = json.loads(shlex.split(chat)[shlex.split(chat).index("-d") + 1])
        # No max_tokens: the seed's context budget is min(max_tokens, ...) x ratio, so a small one leaves no room.
        r = httpx.post(f"{base}/v1/chat/completions", json={**request, "temperature": 0}, timeout=300)
    assert r.status_code == 200 and r.json()["rag"]["applied"] is True
    text = r.json()["choices"][0]["message"]["content"]
    assert re.search(r"Deployment|Service|PersistentVolumeClaim|Secret|NetworkPolic", text, re.I), text
