#!/usr/bin/env bash
# `make run`: the engine on http://$HOST:$PORT with the embedded defaults: the packaged embedding
# model, FAISS under $DATA, the 'sample' index, and SmolLM2-135M on the CPU as the LLM when
# hack/install-llm.sh installed it (otherwise answers are extractive: the sentences that best match).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv} HOST=${HOST:-127.0.0.1} PORT=${PORT:-8000} DATA=${DATA:-./data}
LLM_PORT=${LLM_PORT:-8088} LLM_N_CTX=${LLM_N_CTX:-2048}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

llm_pid=""
cleanup() { [[ -n $llm_pid ]] && kill "$llm_pid" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [[ -z ${RAGENGINE_LLM_URL:-} ]] && VENV=$VENV bash hack/serve-llm.sh --check >/dev/null 2>&1; then
  if curl -sf "http://127.0.0.1:$LLM_PORT/v1/models" >/dev/null 2>&1; then
    echo "[run] port $LLM_PORT already answers /v1/models: using it as the LLM" >&2
  else
    mkdir -p "$DATA"
    VENV=$VENV LLM_PORT=$LLM_PORT LLM_N_CTX=$LLM_N_CTX bash hack/serve-llm.sh > "$DATA/llm.log" 2>&1 &
    llm_pid=$!
    for _ in $(seq 120); do
      curl -sf "http://127.0.0.1:$LLM_PORT/v1/models" >/dev/null 2>&1 && break
      kill -0 "$llm_pid" 2>/dev/null || { echo "[run] the local LLM did not start (see $DATA/llm.log)" >&2; llm_pid=""; break; }
      sleep 0.5
    done
  fi
  if curl -sf "http://127.0.0.1:$LLM_PORT/v1/models" >/dev/null 2>&1; then
    export RAGENGINE_LLM_URL="http://127.0.0.1:$LLM_PORT/v1" RAGENGINE_CONTEXT_WINDOW=$LLM_N_CTX
    echo "[run] LLM: SmolLM2-135M-Instruct (llama.cpp, CPU) on $RAGENGINE_LLM_URL" >&2
  fi
fi
[[ -n ${RAGENGINE_LLM_URL:-} ]] || echo "[run] no LLM: chat answers are extractive (set RAGENGINE_LLM_URL to use one)" >&2

cat >&2 <<MSG
[run] starting the engine on http://$HOST:$PORT (data in $DATA; Ctrl-C stops it). Once it says
      "Application startup complete", try:
  curl -s http://$HOST:$PORT/indexes
  curl -s http://$HOST:$PORT/retrieve -H 'content-type: application/json' \\
       -d '{"index_name": "sample", "query": "How does the engine keep writes durable?", "max_node_count": 3}'
  curl -s http://$HOST:$PORT/v1/chat/completions -H 'content-type: application/json' \\
       -d '{"index_name": "sample", "messages": [{"role": "user", "content": "What does the operator create?"}]}'
  API reference: http://$HOST:$PORT/docs
MSG
"$VENV/bin/ragengine" serve --host "$HOST" --port "$PORT" --data-dir "$DATA" --load-sample-index
