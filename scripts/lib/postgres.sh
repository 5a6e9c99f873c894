# shellcheck shell=bash
# A throwaway PostgreSQL 15 for scripts that check Aqueduct against it
# (scripts/slt-postgres, scripts/psql-compare, ...): initdb in a temporary
# directory (collation C, which is Aqueduct's byte order, and Unicode case
# mapping, ctype C.UTF-8, as Aqueduct's lower() and upper()), started on a free loopback port, stopped by pg_ctl (or by its
# PID) and removed when the script exits.
#
# Source it (after scripts/lib/server.sh, for aq_free_port) from a script
# running under `set -euo pipefail`, then call pg_throwaway_start
# [SUPERUSER]. It sets PG_BIN, PG_DIR and PG_PORT, and traps EXIT to stop
# the server; a script with its own EXIT trap calls pg_throwaway_stop in it.

if [ -z "${PG_BIN:-}" ]; then
  if command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
    PG_BIN=$(pg_config --bindir)
  else
    PG_BIN=/usr/lib/postgresql/15/bin
  fi
fi

# Run PostgreSQL's programs as postgres when we are root (initdb refuses
# root).
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

PG_STARTED=
pg_throwaway_stop() {
  if [ -n "$PG_STARTED" ]; then
    PG_STARTED=
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast -w stop >/dev/null || {
      # pg_ctl could not stop it: end the postmaster by its PID.
      local pid
      pid=$(head -n 1 "$PG_DIR/data/postmaster.pid" 2>/dev/null || true)
      [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    }
  fi
  [ -z "${PG_DIR:-}" ] || rm -rf "$PG_DIR"
}

# pg_throwaway_start [SUPERUSER]: the C locale (byte-order text comparison,
# as Aqueduct) and UTC; trust authentication on loopback only.
pg_throwaway_start() {
  local superuser="${1:-postgres}"
  if [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
    echo "no PostgreSQL server binaries in $PG_BIN (Debian: apt-get install postgresql-15, or set PG_BIN)" >&2
    return 1
  fi
  case "$("$PG_BIN/pg_ctl" --version)" in
    *" 15."*) ;;
    *) echo "warning: Aqueduct is checked against PostgreSQL 15; this is $("$PG_BIN/pg_ctl" --version)" >&2 ;;
  esac
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/aqueduct-pg.XXXXXX")
  mkdir "$PG_DIR/data"
  chmod 700 "$PG_DIR/data"
  [ "$(id -u)" -ne 0 ] || chown -R postgres: "$PG_DIR"
  trap pg_throwaway_stop EXIT
  echo "== initdb in $PG_DIR/data"
  as_pg "$PG_BIN/initdb" -D "$PG_DIR/data" -U "$superuser" -A trust --no-sync \
    --locale=C --lc-ctype=C.UTF-8 --encoding=UTF8 >"$PG_DIR/initdb.log" 2>&1 || {
    cat "$PG_DIR/initdb.log" >&2
    return 1
  }
  # The port is free when chosen; if another process takes it before the
  # postmaster binds it, start fails and another one is tried.
  local attempt
  for attempt in 1 2 3; do
    PG_PORT=$(aq_free_port)
    echo "== start PostgreSQL (attempt $attempt) on 127.0.0.1:$PG_PORT"
    if as_pg "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/postgres.log" -w -t 60 \
      -o "-p $PG_PORT -k $PG_DIR/data -c listen_addresses=127.0.0.1 -c fsync=off -c TimeZone=UTC" \
      start >/dev/null; then
      PG_STARTED=1
      echo "== PostgreSQL pid $(head -n 1 "$PG_DIR/data/postmaster.pid"): $("$PG_BIN/postgres" --version)"
      return 0
    fi
  done
  echo "PostgreSQL did not start; its log:" >&2
  tail -n 30 "$PG_DIR/postgres.log" >&2
  return 1
}
