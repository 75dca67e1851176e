#!/usr/bin/env bash
# A throwaway PostgreSQL server for running the store's tests against a real database.
#
#   scripts/postgres.sh start    # init (first time) and start; prints the export line
#   scripts/postgres.sh stop     # stop the server (data is kept)
#   scripts/postgres.sh status   # running or not, and the URL
#   scripts/postgres.sh url      # print the export line only
#   scripts/postgres.sh purge    # stop and delete the cluster directory
#
# Typical use:   eval "$(scripts/postgres.sh start)" && python -m pytest tests/store
#
# Only the `export EASEML_TEST_POSTGRES_URL=...` line goes to stdout; progress goes
# to stderr, so the eval above works. `start` is idempotent.
#
# Settings (environment):
#   EASEML_PG_DIR   cluster directory (default /tmp/easeml-pg)
#   EASEML_PG_PORT  first port to try (default 55432; the next free one is used)
#   PG_BINDIR       directory with initdb/pg_ctl (default: newest /usr/lib/postgresql/*/bin)
#
# The server listens on 127.0.0.1 only. It is tuned for tests, not for keeping
# data: fsync, synchronous_commit and full_page_writes are off.
set -euo pipefail

PGROOT="${EASEML_PG_DIR:-/tmp/easeml-pg}"
FIRST_PORT="${EASEML_PG_PORT:-55432}"
DATA="$PGROOT/data"
LOG="$PGROOT/server.log"
PORT_FILE="$PGROOT/port"
PASSWORD_FILE="$PGROOT/password"
DB_USER=easeml
DB_NAME=easeml

say() { echo "postgres.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

# PostgreSQL refuses to run as root, so as root the cluster belongs to `postgres`.
if [[ $(id -u) -eq 0 ]]; then
    OWNER=postgres
    as_owner() { runuser -u "$OWNER" -- "$@"; }
else
    OWNER=$(id -un)
    as_owner() { "$@"; }
fi

find_bindir() {
    if [[ -n "${PG_BINDIR:-}" ]]; then
        echo "$PG_BINDIR"
        return
    fi
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [[ -n "$dir" && -x "$dir/initdb" ]]; then
        echo "$dir"
    fi
}

ensure_installed() {
    BINDIR=$(find_bindir)
    if [[ -z "$BINDIR" ]]; then
        [[ $(id -u) -eq 0 ]] || die "PostgreSQL is not installed; run as root or: sudo apt-get install -y postgresql"
        say "installing PostgreSQL with apt-get"
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
        BINDIR=$(find_bindir)
        [[ -n "$BINDIR" ]] || die "apt-get installed postgresql but no initdb was found under /usr/lib/postgresql"
    fi
    id "$OWNER" >/dev/null 2>&1 || die "user $OWNER does not exist (it should come with the postgresql package)"
}

is_running() {
    [[ -f "$DATA/PG_VERSION" ]] && as_owner "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
    local port=$FIRST_PORT
    while port_in_use "$port"; do
        port=$((port + 1))
        [[ $port -lt $((FIRST_PORT + 100)) ]] || die "no free port in $FIRST_PORT..$port"
    done
    echo "$port"
}

print_url() {
    [[ -f "$PORT_FILE" && -f "$PASSWORD_FILE" ]] || die "no cluster in $PGROOT; run: $0 start"
    echo "export EASEML_TEST_POSTGRES_URL=postgresql+psycopg2://$DB_USER:$(cat "$PASSWORD_FILE")@127.0.0.1:$(cat "$PORT_FILE")/$DB_NAME"
}

init_cluster() {
    say "creating a cluster in $DATA (owner $OWNER)"
    mkdir -p "$PGROOT"
    chown "$OWNER" "$PGROOT"
    chmod 0700 "$PGROOT"
    # Superuser access only through the Unix socket in $PGROOT (mode 0700), never over TCP.
    as_owner "$BINDIR/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >&2 2>/dev/null \
        || as_owner "$BINDIR/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
            --encoding=UTF8 --no-locale >&2
    as_owner tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# --- scripts/postgres.sh: a test server, fast and local ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PGROOT'
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
    # A fresh random password per cluster; hex, so it needs no quoting in URLs or SQL.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$PASSWORD_FILE"
    chmod 0600 "$PASSWORD_FILE"
}

psql_admin() {
    as_owner "$BINDIR/psql" -h "$PGROOT" -p "$(cat "$PORT_FILE")" -U postgres -d postgres \
        -v ON_ERROR_STOP=1 -qtA "$@"
}

ensure_role_and_db() {
    local password
    password=$(cat "$PASSWORD_FILE")
    if [[ -z $(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$DB_USER'") ]]; then
        # CREATEDB: the tests create (and drop) a fresh database per test module.
        psql_admin -c "CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$password'" >/dev/null
    fi
    if [[ -z $(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'") ]]; then
        psql_admin -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >/dev/null
    fi
}

wait_ready() {
    local port
    port=$(cat "$PORT_FILE")
    for _ in $(seq 1 60); do
        if "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port"; then
            return 0
        fi
        sleep 0.5
    done
    die "the server did not accept connections within 30 s; see $LOG"
}

start() {
    ensure_installed
    if is_running; then
        say "already running in $DATA"
        wait_ready
        print_url
        return
    fi
    [[ -f "$DATA/PG_VERSION" ]] || init_cluster
    local port
    port=$(pick_port)
    echo "$port" >"$PORT_FILE"
    as_owner touch "$LOG" 2>/dev/null || { touch "$LOG" && chown "$OWNER" "$LOG"; }
    say "starting on 127.0.0.1:$port (log: $LOG)"
    as_owner "$BINDIR/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 -o "-p $port" start >&2 \
        || die "pg_ctl start failed; see $LOG"
    wait_ready
    ensure_role_and_db
    print_url
}

stop() {
    ensure_installed
    if is_running; then
        as_owner "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >&2
    else
        say "not running"
    fi
}

status() {
    ensure_installed
    if is_running; then
        say "running in $DATA"
        print_url
    else
        say "not running"
        return 3
    fi
}

purge() {
    stop || true
    say "removing $PGROOT"
    rm -rf "$PGROOT"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    url) print_url ;;
    purge) purge ;;
    *)
        echo "usage: $0 start|stop|status|url|purge" >&2
        exit 2
        ;;
esac
