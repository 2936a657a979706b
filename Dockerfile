# hangar itself: the GitHub App service, small and non-root.
#
# Build with scripts/image.sh, which first puts every Python dependency into
# build/wheels on the building machine, so the build itself needs no network:
#   scripts/image.sh hangar:latest                 (FROM hangar-image-base:1, made offline
#                                                   by scripts/base-image.sh: python3, git,
#                                                   bubblewrap)
#   scripts/image.sh hangar:latest my/base:tag     (any Debian-like base)
# A base that already has python3, git and bubblewrap needs no package mirror; any other
# base gets them from apt, which needs a network the default build does not have.
ARG BASE_IMAGE=hangar-image-base:1
FROM ${BASE_IMAGE}

USER root
# git (the repositories), bubblewrap (the local sandbox provider), python3 (hangar);
# the docker and kubernetes providers are Python clients and need no binaries.
RUN set -eu; missing=""; \
    for pair in python3:python3 git:git bwrap:bubblewrap; do \
      command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"; \
    done; \
    if [ -n "$missing" ]; then \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        $missing ca-certificates; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    python3 -m venv --without-pip /opt/hangar/venv; \
    (getent passwd hangar >/dev/null || useradd --system --uid 10001 --create-home \
      --home-dir /var/lib/hangar --shell /usr/sbin/nologin hangar 2>/dev/null \
      || { echo 'hangar:x:10001:10001::/var/lib/hangar:/usr/sbin/nologin' >>/etc/passwd; \
           echo 'hangar:x:10001:' >>/etc/group; mkdir -p /var/lib/hangar; }); \
    mkdir -p /var/lib/hangar/data; chown -R 10001:10001 /var/lib/hangar

# The dependencies first, from the wheels alone: this layer is built again only when they
# change, not with every change to hangar's source. pip runs from its own wheel: the base
# needs no pip; --no-index keeps the build offline.
COPY build/wheels /tmp/wheels
COPY build/dependencies.txt /tmp/dependencies.txt
RUN set -eu; pip_wheel="$(ls /tmp/wheels/pip-*.whl | head -n 1)"; \
    /opt/hangar/venv/bin/python "$pip_wheel/pip" install --no-index --find-links /tmp/wheels \
      --no-cache-dir --disable-pip-version-check --quiet -r /tmp/dependencies.txt; \
    rm -rf /tmp/wheels /tmp/dependencies.txt; \
    find /opt/hangar -name '__pycache__' -prune -exec rm -rf {} +
# Then hangar itself, with only the wheels that build it (pip's, setuptools').
COPY build/wheels/pip-*.whl build/wheels/setuptools-*.whl /tmp/wheels/
COPY pyproject.toml README.md /opt/hangar/src/
COPY app /opt/hangar/src/app
COPY handlers /opt/hangar/src/handlers
COPY sandbox /opt/hangar/src/sandbox
COPY proxy /opt/hangar/src/proxy
COPY fakehub /opt/hangar/src/fakehub
COPY envs /opt/hangar/src/envs
COPY manifests /opt/hangar/src/manifests
# Editable, so hangar finds manifests/ and envs/ beside its code.
RUN set -eu; pip_wheel="$(ls /tmp/wheels/pip-*.whl | head -n 1)"; \
    /opt/hangar/venv/bin/python "$pip_wheel/pip" install --no-index --find-links /tmp/wheels \
      --no-cache-dir --disable-pip-version-check --quiet --no-deps --editable /opt/hangar/src; \
    rm -rf /tmp/wheels /opt/hangar/src/build; \
    find /opt/hangar -name '__pycache__' -prune -exec rm -rf {} +

ENV PATH=/opt/hangar/venv/bin:$PATH \
    HANGAR_DATA_DIR=/var/lib/hangar/data \
    HANGAR_ENVS_DIR=/opt/hangar/src/envs \
    HANGAR_HOST=0.0.0.0 \
    HANGAR_PORT=8787 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/hangar
EXPOSE 8787
ENTRYPOINT ["hangar"]
CMD ["serve"]
