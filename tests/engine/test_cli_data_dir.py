"""`ragengine serve` on a data folder it cannot write says what to do (issue 48: on the local cluster's default
StorageClass the engine crash-looped with click's bare "Directory '/data' is not readable")."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from click.testing import CliRunner

from ragengine.cli import main


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[Path]:
    """A folder nobody may write, root included (the immutable attribute): as a volume the pod's user cannot."""
    path.mkdir()
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_an_unwritable_data_folder_is_refused_with_what_to_do(tmp_path):
    with unwritable(tmp_path / "data") as data:
        result = CliRunner().invoke(main, ["serve", "--data-dir", str(data), "--port", "0"])
    assert result.exit_code == 1, result.output
    assert f"the data folder {data} is not writable by this process" in result.output
    assert "storageClassName" in result.output and "ragengine-local" in result.output
    assert "mode 0755" in result.output or "mode 07" in result.output  # who owns it, and how


def test_a_missing_data_folder_under_an_unwritable_one_is_refused_the_same_way(tmp_path):
    with unwritable(tmp_path / "volume") as volume:
        result = CliRunner().invoke(main, ["serve", "--data-dir", str(volume / "data"), "--port", "0"])
    assert result.exit_code == 1 and "is not writable by this process" in result.output, result.output
