#!/usr/bin/env bash
# Build hangar's image. Python packages are fetched here, with pip, into build/wheels
# (for this machine's Python version: use a base with the same one), so `docker build`
# itself runs without a network.
# Usage: scripts/image.sh [TAG] [BASE_IMAGE]   (defaults: hangar:latest, hangar-image-base:1)
# The default base is the project's own, made by scripts/base-image.sh from Debian packages
# (python3, git, bubblewrap) with no registry; it is built here when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-hangar:latest}"
base="${2:-hangar-image-base:1}"
if [ "$base" = hangar-image-base:1 ] && ! docker image inspect "$base" >/dev/null 2>&1; then
  echo "image: building the base $base (scripts/base-image.sh)"
  HANGAR_BASE_EXTRA=bubblewrap scripts/base-image.sh "$base"
fi
python="${HANGAR_PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3

mkdir -p build/wheels
echo "image: collecting wheels into build/wheels"
# Only the dependencies pyproject.toml names (and the build backend): the project itself
# is built from its source in the image, and building it here would write build/lib in
# the checkout, which anything else building from the same checkout would race.
# dependencies.txt: what the image installs first, in a layer of its own (Dockerfile).
"$python" -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))
print("\n".join(p["project"]["dependencies"]), file=open("build/dependencies.txt", "w"))
print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' >build/requirements.txt
# The wheels already there, or kept from an earlier build in another checkout, are a
# cache: when they satisfy every requirement, the index is not asked (resolving against it
# costs about ten seconds), else it is, and what it gave is kept for the next build. With
# no home, or one that cannot hold the cache, the build only takes longer.
cache="${HANGAR_WHEEL_CACHE:-}"
if [ -z "$cache" ] && [ -n "${XDG_CACHE_HOME:-${HOME:-}}" ]; then
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/hangar/wheels"
fi
[ -z "$cache" ] || mkdir -p "$cache" 2>/dev/null || cache=""
wheel=("$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir build/wheels
       -r build/requirements.txt pip)
if ! "${wheel[@]}" --no-index --find-links build/wheels ${cache:+--find-links "$cache"} \
     2>/dev/null; then
  "${wheel[@]}" 2> >(grep -v 'is ignored' >&2)
  [ -z "$cache" ] || cp -p build/wheels/*.whl "$cache/" 2>/dev/null || true
fi

echo "image: building $tag from $base"
docker build --network none --build-arg "BASE_IMAGE=$base" -t "$tag" . >build/image.log 2>&1 || {
  echo "image: docker build failed; the end of build/image.log:" >&2
  tail -n 30 build/image.log >&2
  exit 1
}
echo "image: $tag ready"
