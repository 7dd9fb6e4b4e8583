"""Where an embedding model is: ``package:<module>`` names (a model shipped in a Python package), local folders,
and the hub's cache when the engine runs offline. Below ``core`` (which loads a model) and ``export`` (which
exports one to ONNX), so neither imports the other to find a model."""

from __future__ import annotations

import contextlib
import os

PACKAGE_PREFIX = "package:"


def resolve_model_path(name: str) -> str:
    """``package:<module>`` → the model directory shipped in that Python package; anything else as is."""
    if name.startswith(PACKAGE_PREFIX):
        import importlib

        module = importlib.import_module(name[len(PACKAGE_PREFIX):])
        return str(module.get_model_path())
    return name


def check_offline_model(name: str, cache_dir: str | None = None) -> None:
    """Offline (``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE``), a hub name must be in the local cache: say so at
    once, before importing torch to find out (a minute on a busy machine: the first request naming an unknown
    model waited that long for its 422; found by the fuzzer, issue 41)."""
    offline = any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on") for v in ("HF_HUB_OFFLINE",
                                                                                      "TRANSFORMERS_OFFLINE"))
    if not offline or name.startswith(PACKAGE_PREFIX) or os.path.exists(name):
        return
    from huggingface_hub import try_to_load_from_cache

    found = False
    for folder in (cache_dir, None):  # the engine's own model cache, then the hub's default one
        with contextlib.suppress(Exception):  # not a valid hub name either
            found = found or isinstance(try_to_load_from_cache(name, "config.json", cache_dir=folder), str)
    if not found:
        raise OSError(f"{name!r} is neither a local folder nor in the local model cache, and the engine is offline "
                      "(HF_HUB_OFFLINE)")
