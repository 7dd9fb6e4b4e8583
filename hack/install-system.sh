#!/usr/bin/env bash
# Debian packages the tests use as real servers or tools, installed only when missing: git (git
# http-backend serves the git sources' test repositories), openssh-server (sshd for git over SSH) and
# strace (tests/engine/test_fsync.py watches the engine's fsync calls).
set -euo pipefail
missing=()
command -v git >/dev/null || missing+=(git)
[ -x /usr/lib/git-core/git-http-backend ] || [ -x /usr/libexec/git-core/git-http-backend ] || missing+=(git)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v strace >/dev/null || missing+=(strace)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "==> installing Debian packages: ${missing[*]}"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -q >/dev/null || true  # a stale package list: the install below says what failed
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
