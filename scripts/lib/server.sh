# shellcheck shell=bash
# Helpers shared by scripts/client-tests and scripts/crash-test: build the
# server, start it on free loopback ports, wait for /health, stop it by PID,
# and install psycopg into a project-local directory.
#
# Source it from a script running under `set -euo pipefail` whose working
# directory is the repository root.

# The binary: $AQUEDUCT_BIN if set, else built here with $AQUEDUCT_PROFILE
# (release by default; scripts/test passes "debug" to reuse its test build).
aq_build() {
  if [ -n "${AQUEDUCT_BIN:-}" ]; then
    [ -x "$AQUEDUCT_BIN" ] || { echo "AQUEDUCT_BIN=$AQUEDUCT_BIN is not an executable" >&2; return 1; }
    return 0
  fi
  local profile="${AQUEDUCT_PROFILE:-release}"
  case "$profile" in
    release) cargo build --release -q -p aqueduct; AQUEDUCT_BIN="$PWD/target/release/aqueduct" ;;
    debug | dev) cargo build -q -p aqueduct; AQUEDUCT_BIN="$PWD/target/debug/aqueduct" ;;
    *) echo "AQUEDUCT_PROFILE must be release or debug, not $profile" >&2; return 1 ;;
  esac
  export AQUEDUCT_BIN
}

# A TCP port free on 127.0.0.1 right now (the kernel picks it).
aq_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# aq_start DATA_DIR LOG_FILE [extra serve flags...]
# Starts the server in the background on fresh free ports and waits until
# /health answers. Sets AQ_PID, AQ_PG_PORT, AQ_HTTP_PORT. Retries with other
# ports if the server exits during start-up (a port taken in between).
# With AQ_REUSE_PORTS=1 the first attempt keeps AQ_PG_PORT and AQ_HTTP_PORT
# (a restart that clients reconnect to at the same address).
aq_start() {
  local dir="$1" log="$2"
  shift 2
  local attempt
  for attempt in 1 2 3; do
    if [ "${AQ_REUSE_PORTS:-}" != 1 ] || [ "$attempt" != 1 ] || [ -z "${AQ_HTTP_PORT:-}" ]; then
      AQ_PG_PORT=$(aq_free_port)
      AQ_HTTP_PORT=$(aq_free_port)
      while [ "$AQ_HTTP_PORT" = "$AQ_PG_PORT" ]; do AQ_HTTP_PORT=$(aq_free_port); done
    fi
    echo "== start (attempt $attempt): pg 127.0.0.1:$AQ_PG_PORT http 127.0.0.1:$AQ_HTTP_PORT" >>"$log"
    # The settings come from the flags alone, not from AQUEDUCT_* variables
    # that happen to be set.
    env -u AQUEDUCT_CONFIG -u AQUEDUCT_DATA_DIR -u AQUEDUCT_PG_ADDR -u AQUEDUCT_HTTP_ADDR \
      -u AQUEDUCT_FSYNC -u AQUEDUCT_SEGMENT_BYTES -u AQUEDUCT_MAX_CONNECTIONS -u AQUEDUCT_USERS \
      -u AQUEDUCT_HTTP_TOKENS -u AQUEDUCT_TLS_CERT -u AQUEDUCT_TLS_KEY -u AQUEDUCT_COMPACTION_INTERVAL_SECS \
      "$AQUEDUCT_BIN" serve --data-dir "$dir" \
      --pg-addr "127.0.0.1:$AQ_PG_PORT" --http-addr "127.0.0.1:$AQ_HTTP_PORT" "$@" \
      </dev/null >>"$log" 2>&1 &
    AQ_PID=$!
    if aq_wait_healthy "${AQ_START_TIMEOUT:-60}"; then
      return 0
    fi
    if kill -0 "$AQ_PID" 2>/dev/null; then
      # Running but not healthy in time: give up rather than guess.
      echo "aqueduct (pid $AQ_PID) did not report healthy on 127.0.0.1:$AQ_HTTP_PORT in time; log $log:" >&2
      tail -n 30 "$log" >&2
      aq_stop
      return 1
    fi
    wait "$AQ_PID" 2>/dev/null || true
    AQ_PID=
  done
  echo "aqueduct did not start; log $log:" >&2
  tail -n 30 "$log" >&2
  return 1
}

# aq_wait_healthy SECONDS: polls GET /health until it answers 200 with
# status ok; fails early if the server process has exited.
aq_wait_healthy() {
  python3 - "$AQ_HTTP_PORT" "$AQ_PID" "$1" <<'EOF'
import json, os, sys, time, urllib.request
port, pid, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    # A zombie (exited, not yet reaped) still answers kill 0.
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                sys.exit(1)
    except OSError:
        pass
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            if r.status == 200 and json.load(r).get("status") == "ok":
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.05)
sys.exit(1)
EOF
}

# Stops the server started by aq_start: SIGTERM, up to 20 s to exit, then
# SIGKILL. Returns the server's exit status (0 for a clean shutdown).
aq_stop() {
  [ -n "${AQ_PID:-}" ] || return 0
  local pid="$AQ_PID" status=0 i
  AQ_PID=
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 200; i++)); do
    aq_running "$pid" || break
    sleep 0.1
  done
  if aq_running "$pid"; then
    echo "aqueduct (pid $pid) did not exit 20 s after SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || status=$?
  return "$status"
}

# Kills the server started by aq_start with SIGKILL and reaps it.
aq_kill9() {
  [ -n "${AQ_PID:-}" ] || return 0
  local pid="$AQ_PID"
  AQ_PID=
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# True while PID runs (a zombie, exited but not reaped, counts as gone).
aq_running() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# psycopg 3 (with its binary wheel: no libpq needed) in .deps/, keyed by the
# Python version; installed once, then reused. Exports PYTHONPATH.
AQ_PSYCOPG_VERSION=3.3.9
aq_python_deps() {
  local pyver dir
  pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  dir="$PWD/.deps/python-$pyver"
  if ! PYTHONPATH="$dir" python3 -c "import psycopg, sys; sys.exit(psycopg.__version__ != '$AQ_PSYCOPG_VERSION')" 2>/dev/null; then
    echo "installing psycopg $AQ_PSYCOPG_VERSION into $dir"
    rm -rf "$dir"
    timeout 600 python3 -m pip install -q --disable-pip-version-check --no-cache-dir \
      --root-user-action=ignore --target "$dir" "psycopg[binary]==$AQ_PSYCOPG_VERSION"
  fi
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
}
