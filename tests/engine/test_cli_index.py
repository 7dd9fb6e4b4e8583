"""``ragengine index`` for pipelines (issue 44): every skipped file named with its reason, ``--strict``,
``--json``, the key from ``RAGENGINE_API_KEY``, and a re-run over an unchanged folder sends nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from ragengine import indexer
from ragengine.cli import API_KEY_FLAG_WARNING, main
from tests.support import corpus


def _bad_mix(folder: Path) -> Path:
    """One good file and five bad ones, as the issue's 'badmix' folder had them."""
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nThe pump restarts with the red switch.")
    (folder / "locked.pdf").write_bytes(corpus.encrypted_pdf_bytes())
    (folder / "bomb.docx").write_bytes(corpus.zip_bomb())
    (folder / "truncated.xlsx").write_bytes(corpus.xlsx_bytes()[:300])
    (folder / "empty.txt").write_text("   \n")
    (folder / "notes.txt").write_bytes(b"\x00\x01binary\xff")
    return folder


@pytest.mark.stores("faiss")  # parsing is the same whatever the store
def test_bad_files_are_named_with_their_reason_and_strict_fails(server, tmp_path: Path):
    folder = _bad_mix(tmp_path / "badmix")
    run = CliRunner().invoke(main, ["index", str(folder), "--index", "badmix", "--url", server, "--strict"])
    assert run.exit_code == 1, run.output
    lines = run.stdout.splitlines()
    assert "skipped bomb.docx (zip_bomb): DOCX: the archive would unpack to 600 MiB (the limit is 512 MiB): a zip " \
           "bomb or an oversized file" in lines
    assert any(x.startswith("skipped locked.pdf (encrypted): PDF: the PDF is encrypted with a password (") for x in lines)
    assert any(x.startswith("skipped truncated.xlsx (unreadable): XLSX: the XLSX file is not a valid archive "
                            "(truncated or corrupt)") for x in lines), lines
    assert "skipped empty.txt (empty): no text" in lines
    assert "skipped notes.txt (not_text): binary or not UTF-8 text" in lines
    assert lines[-1] == ("indexed 6 files into 'badmix' (source 'badmix'): 1 added, 0 updated, 0 unchanged, "
                         "0 deleted, 5 skipped")
    assert "error: 5 file(s) skipped (--strict)" in run.stderr

    again = CliRunner().invoke(main, ["index", str(folder), "--index", "badmix", "--url", server, "--json"])
    assert again.exit_code == 0, again.output  # without --strict a skipped file is reported, not fatal
    report = json.loads(again.stdout)
    assert (report["added"], report["updated"], report["unchanged"], report["files"]) == (0, 0, 1, 6)
    assert {s["path"]: s["code"] for s in report["skipped"]} == {
        "bomb.docx": "zip_bomb", "locked.pdf": "encrypted", "truncated.xlsx": "unreadable", "empty.txt": "empty",
        "notes.txt": "not_text"}
    docs = httpx.get(f"{server}/indexes/badmix/documents").json()["documents"]
    assert [d["doc_id"] for d in docs] == ["badmix:guide.md"]


def test_an_unchanged_folder_sends_nothing_and_changes_send_only_themselves(server, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.md").write_text(f"# {name}\n\nText of {name}.")
    sent: list[str] = []

    def run(**options) -> indexer.Report:
        with httpx.Client(base_url=server, event_hooks={"request": [lambda r: sent.append(f"{r.method} {r.url.path}")]}) \
                as client:
            return indexer.index_folder(indexer.EngineIndex(client, "ci"), folder, sorted(folder.iterdir()),
                                        indexer.Options(source="docs", **options))

    first = run()
    assert (first.added, first.unchanged) == (3, 0)
    sent.clear()
    second = run()
    assert (second.added, second.updated, second.unchanged) == (0, 0, 3)
    assert sent == ["GET /indexes/ci/documents"]  # the hashes the index holds, and nothing else
    (folder / "b.md").write_text("# b\n\nNew text of b.")
    (folder / "c.md").unlink()
    sent.clear()
    third = run(prune=True)
    assert (third.added, third.updated, third.unchanged, third.deleted) == (0, 1, 1, 1)
    assert sent == ["GET /indexes/ci/documents", "POST /indexes/ci/documents", "POST /indexes/ci/documents/delete"]
    held = {d["doc_id"]: d["text"] for d in httpx.get(f"{server}/indexes/ci/documents",
                                                          params={"max_text_length": 100}).json()["documents"]}
    assert held == {"docs:a.md": "# a\n\nText of a.", "docs:b.md": "# b\n\nNew text of b."}


@pytest.mark.stores("faiss")
def test_the_key_comes_from_the_environment_and_the_flag_warns(make_server, tmp_path: Path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("Apples are red.")
    with make_server(api_key="sekret") as (base, _):
        refused = CliRunner().invoke(main, ["index", str(folder), "--index", "k", "--url", base])
        assert refused.exit_code == 1 and "401" in refused.output
        ok = CliRunner(env={"RAGENGINE_API_KEY": "sekret"}).invoke(main, ["index", str(folder), "--index", "k",
                                                                         "--url", base])
        assert ok.exit_code == 0 and API_KEY_FLAG_WARNING not in ok.stderr, ok.output
        flag = CliRunner().invoke(main, ["index", str(folder), "--index", "k", "--url", base, "--api-key", "sekret"])
        assert flag.exit_code == 0 and API_KEY_FLAG_WARNING in flag.stderr, flag.output
        assert "0 added, 0 updated, 1 unchanged" in flag.stdout
