#!/usr/bin/env bash
# Debian packages the tests use as real servers, installed only when missing: git (git http-backend
# serves the git sources' test repositories) and openssh-server (sshd for git over SSH); and Tesseract
# with its English data, the OCR of scanned pages and images (issue 29; docs/documents.md).
set -euo pipefail
missing=()
command -v git >/dev/null || missing+=(git)
[ -x /usr/lib/git-core/git-http-backend ] || [ -x /usr/libexec/git-core/git-http-backend ] || missing+=(git)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v tesseract >/dev/null || missing+=(tesseract-ocr)
ls /usr/share/tesseract-ocr/*/tessdata/eng.traineddata >/dev/null 2>&1 || missing+=(tesseract-ocr-eng)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "==> installing Debian packages: ${missing[*]}"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -q >/dev/null || true  # a stale package list: the install below says what failed
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
