#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the tests use (tests/support/otelcol.py) from Go modules, as
# hack/control-plane/build.sh builds the control plane: a small ocb-style main (main.go, components.go:
# the OTLP receiver and the contrib file exporter) compiled into a cache dir outside the repo.
# Idempotent: exits at once when the binary is there. Progress on stderr; the binary's path on stdout.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
BIN=${OTELCOL_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ragengine/otelcol/$OTELCOL_KEY}
OUT=$BIN/otelcol-ragengine
if [[ -x $OUT ]]; then echo "$OUT"; exit 0; fi

log() { echo "[otelcol $(date +%H:%M:%S)] $*" >&2; }
trap 'log "FAILED. If a module version is not on the proxy (403/404 above), pin another release in $HERE/versions.env"' ERR
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath
mkdir -p "$BIN"
WORK=$(mktemp -d "$BIN/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cp "$HERE/main.go" "$HERE/components.go" "$WORK/"
cd "$WORK"
T0=$(date +%s)
go mod init ragengine.local/otelcol 2>/dev/null
# The pinned releases, then `go get .`: it resolves what main.go and components.go import, at those
# versions. Not `go mod tidy`: tidy also resolves the tests of every dependency, and one of those (the
# contrib otlpencodingextension v0.165.0, a test-only import of the file exporter) is 403 on the proxy.
go mod edit \
  -require="go.opentelemetry.io/collector/otelcol@$OTELCOL_VERSION" \
  -require="go.opentelemetry.io/collector/receiver/otlpreceiver@$OTELCOL_VERSION" \
  -require="go.opentelemetry.io/collector/service@$OTELCOL_VERSION" \
  -require="go.opentelemetry.io/collector/confmap@$OTELCOL_STABLE_VERSION" \
  -require="go.opentelemetry.io/collector/confmap/provider/envprovider@$OTELCOL_STABLE_VERSION" \
  -require="go.opentelemetry.io/collector/confmap/provider/fileprovider@$OTELCOL_STABLE_VERSION" \
  -require="github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter@$OTELCOL_CONTRIB_VERSION"
log "resolving modules (collector $OTELCOL_VERSION, file exporter $OTELCOL_CONTRIB_VERSION)"
go get . >&2
log "compiling otelcol-ragengine"
go build -ldflags "-s -w" -o "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
cp go.mod go.sum "$BIN/"
echo "cold build: $(( $(date +%s) - T0 )) s on $(nproc) cores ($(date -u +%FT%TZ))" >> "$BIN/build-time.txt"
log "done -> $OUT"
echo "$OUT"
