#!/usr/bin/env bash
# Screenshots of the demo for the README: starts `make run` on a spare port, waits for the
# demo's pods to start, and has headless Chromium (Debian's package) capture the pages.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-8765}
CHROMIUM=${CHROMIUM:-/usr/lib/chromium/chromium}
ACCELPLANE_PORT=$PORT make run > var/screenshots.log 2>&1 &
RUN=$!
trap 'kill $RUN 2>/dev/null; wait $RUN 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$PORT/" >/dev/null && break; sleep 1; done
sleep "${SETTLE_SECONDS:-50}"   # the demo's pods become ready and the TPU pool provisions
"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
  --window-size=1280,1100 --screenshot=docs/screenshots/overview.png "http://127.0.0.1:$PORT/"
