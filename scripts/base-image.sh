#!/usr/bin/env bash
# Build the sandbox base image hangar-base:1 from a Debian rootfs when it is missing.
# No registry is needed: debootstrap fetches Debian packages, `docker import` turns the
# rootfs into an image. The rootfs tarball is cached, so a rebuild after `docker rmi`
# takes seconds.
# Usage: scripts/base-image.sh [image]   (default hangar-base:1)
# HANGAR_BASE_EXTRA=pkg,pkg adds Debian packages (an environment's image_recipe does).
set -euo pipefail
image="${1:-hangar-base:1}"
suite=bookworm
# The machine's own Debian mirror (from apt's sources), unless HANGAR_DEBIAN_MIRROR says
# otherwise; with neither, debootstrap uses its default.
mirror="${HANGAR_DEBIAN_MIRROR:-$(grep -rhoE '^(URIs:|deb)[[:space:]]+[^[:space:]]+' \
  /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | awk '{print $2}' \
  | grep -E '/debian/?$' | head -n 1 || true)}"
# python3 also runs the relay to hangar's sandbox gate (network: loopback); keep it.
packages=git,ca-certificates,python3${HANGAR_BASE_EXTRA:+,$HANGAR_BASE_EXTRA}
cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/hangar"
tarball="$cache_dir/rootfs-$suite-$(echo "$packages" | tr ',' '-').tar"

if docker image inspect "$image" >/dev/null 2>&1; then
  exit 0
fi

if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null 2>&1 || {
    echo "base-image: debootstrap is not installed: apt-get install debootstrap" >&2
    exit 1
  }
  mkdir -p "$cache_dir"
  work="$(mktemp -d "$cache_dir/rootfs.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "base-image: building a $suite rootfs with $packages (about a minute)"
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" ${mirror:+"$mirror"} \
      >"$work/debootstrap.log" 2>&1; then
    echo "base-image: debootstrap failed; last lines of its log:" >&2
    tail -n 20 "$work/debootstrap.log" >&2
    exit 1
  fi
  # A small image: no apt lists, no package caches, no docs.
  rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin \
    "$work/root/var/cache/apt/archives/"*.deb "$work/root/usr/share/doc" \
    "$work/root/usr/share/man" "$work/root/usr/share/info"
  tar -C "$work/root" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
fi

echo "base-image: importing $image"
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /workspace' \
  --change 'CMD ["sleep", "infinity"]' \
  - "$image" <"$tarball" >/dev/null
echo "base-image: $image ready"
