"""The image references users meet agree: the chart's values, the operator's own defaults, and the names
`make images` builds under a registry (docs/images.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from ragengine_operator.manifests.labels import Owner
from ragengine_operator.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def _values() -> dict:
    return yaml.safe_load((ROOT / "charts" / "ragengine" / "values.yaml").read_text())


def _chart_app_version() -> str:
    return yaml.safe_load((ROOT / "charts" / "ragengine" / "Chart.yaml").read_text())["appVersion"]


def test_chart_defaults_are_the_operators_defaults():
    values, settings = _values(), OperatorSettings()
    assert values["defaults"]["engineImage"] == settings.engine_image == Owner("n", "r", "u").engine_image
    assert values["defaults"]["vllmImage"] == settings.vllm_image


def test_published_names_are_what_make_images_builds():
    names = subprocess.run(["bash", str(ROOT / "hack" / "images.sh"), "names"], capture_output=True, text=True,
                           check=True, env={"IMAGE_REGISTRY": "ghcr.io/ragengine", "IMAGE_TAG": _chart_app_version(),
                                            "PATH": "/usr/bin:/bin"}).stdout.split()
    values = _values()
    assert names == [OperatorSettings().engine_image, f"{values['image']['repository']}:{_chart_app_version()}"]
