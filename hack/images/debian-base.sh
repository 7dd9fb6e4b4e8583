#!/usr/bin/env bash
# A Python 3.11 base image made from Debian bookworm's own packages, for machines that reach Debian's
# package mirror but no image registry (FROM python:3.11-slim cannot be pulled there). It plays the role
# of python:3.11-slim: python3 (3.11) with venv, python on PATH, CA certificates, a UTF-8 locale.
#
#   hack/images/debian-base.sh [IMAGE]    build IMAGE (default localhost/ragengine-python:3.11-bookworm)
#                                         unless it exists; prints its name on stdout
# debootstrap needs root (or fakeroot); about 30 s. Debian's mirror is read from the machine's apt sources.
set -euo pipefail
IMAGE=${1:-localhost/ragengine-python:3.11-bookworm}
log() { echo "[base] $*" >&2; }
if podman image exists "$IMAGE"; then echo "$IMAGE"; exit 0; fi
command -v debootstrap >/dev/null || { log "debootstrap is missing: run hack/install-system.sh"; exit 1; }
mirror=$(grep -hoE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
         | grep -oE 'https?://[^ ]+' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d "${TMPDIR:-/tmp}/ragengine-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "debootstrap bookworm from $mirror (about 30 s)"
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  bookworm "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
# What python:3.11-slim leaves out too: package caches, docs, man pages, locales but C.UTF-8.
rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/cache/apt/*.bin "$work"/rootfs/var/lib/apt/lists/* \
       "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/* "$work"/rootfs/usr/share/info/* \
       "$work"/rootfs/var/log/*.log "$work"/rootfs/var/cache/debconf/*-old
find "$work/rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.UTF-8' -exec rm -rf {} + 2>/dev/null || true
tar -C "$work/rootfs" -c . | podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$IMAGE" > /dev/null
log "built $IMAGE ($(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$IMAGE"
