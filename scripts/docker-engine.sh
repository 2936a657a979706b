#!/usr/bin/env bash
# Start a Docker engine if none answers. Its bridge is never used by hangar's tests
# (they give containers the host network or none).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
mkdir -p /var/log
echo "setup: starting dockerd"
nohup dockerd >/var/log/hangar-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "setup: dockerd did not start; see /var/log/hangar-dockerd.log" >&2
tail -n 20 /var/log/hangar-dockerd.log >&2 || true
exit 1
