#!/usr/bin/env bash
# Builds the Docker sandbox's image with no registry: a minimal Debian root made by debootstrap with
# python3 (and coreutils' timeout, in every Debian root), turned into an image by `docker import`.
# Prints the image's tag. Needs root, debootstrap and a Docker engine; takes about a minute the first time.
#
# The recipe is pinned (suite, variant, packages below); the tag carries a hash of this file, so a changed
# recipe builds a new image. The root's tarball is cached (~/.cache/llmgym), so a fresh engine imports it in
# seconds instead of bootstrapping again. Use the image with make_sandbox("docker", image=<tag>).
set -euo pipefail

SUITE=bookworm
VARIANT=minbase
PACKAGES=python3
MIRROR="${LLMGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

recipe_hash="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
tag="llmgym-sandbox:$SUITE-$recipe_hash"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/llmgym"
tarball="$cache/sandbox-root-$SUITE-$recipe_hash.tar"

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "debootstrap needs root to build the sandbox image" >&2; exit 1; }
  root="$(mktemp -d)"
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant="$VARIANT" --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >&2
  rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
  mkdir -p "$cache"
  tar -C "$root" -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
fi
docker import --change 'CMD ["python3"]' --message "llmgym sandbox: debootstrap $VARIANT $SUITE + $PACKAGES" \
  "$tarball" "$tag" >/dev/null
echo "$tag"
