#!/usr/bin/env bash
# A throwaway dask-gateway server on loopback, for the gateway tests and for trying
# `easeml serve --engine gateway` by hand. Its clusters are local processes of this user
# (dask-gateway-server's UnsafeLocalBackend), and clients log in with a shared password
# (SimpleAuthenticator); a deployment uses JupyterHub's authenticator instead (docs/clusters.md).
#
#   scripts/gateway.sh start    # write the config (first time), start; prints the export lines
#   scripts/gateway.sh stop     # stop the server (it stops its clusters)
#   scripts/gateway.sh status   # running or not, and the export lines
#   scripts/gateway.sh env      # print the export lines only
#
# Typical use:   eval "$(scripts/gateway.sh start)" && easeml serve --engine gateway
#
# The export lines are dask-gateway's own client configuration (dask config `gateway.*` as
# DASK_GATEWAY__... environment variables): the address of the gateway's public proxy
# (clients reach both its HTTP API and their schedulers through it), basic auth with the
# password. Only they go to stdout; progress goes to stderr. `start` is idempotent.
#
# Settings (environment):
#   EASEML_GATEWAY_DIR   config, pid file, log, cluster working directories (default /tmp/easeml-gateway)
set -euo pipefail

DIR="${EASEML_GATEWAY_DIR:-/tmp/easeml-gateway}"
CONFIG="$DIR/dask_gateway_config.py"
PID_FILE="$DIR/gateway.pid"
ENV_FILE="$DIR/env"
LOG="$DIR/gateway.log"

say() { echo "gateway.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

command -v dask-gateway-server >/dev/null 2>&1 \
    || die "no dask-gateway-server on PATH (pip install 'dask-gateway-server[local]' dask-gateway)"

running() {  # running PID: alive and not a zombie (an orphan may wait a while to be reaped)
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n "$state" && "$state" != Z* ]]
}

pid_alive() { [[ -f "$PID_FILE" ]] && running "$(cat "$PID_FILE")"; }

free_port() {
    python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_config() {
    local api_port proxy_port password
    api_port=$(free_port)
    proxy_port=$(free_port)
    [[ "$api_port" != "$proxy_port" ]] || proxy_port=$(free_port)
    # A fresh random password per server; hex behind a letter, so dask's config parser keeps it a string.
    password="pw$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    mkdir -p "$DIR/clusters"
    cat >"$CONFIG" <<CONF
# Written by scripts/gateway.sh: a loopback dask-gateway for tests.
import os
import sys

bindir = os.path.dirname(sys.executable)
c.DaskGateway.address = "127.0.0.1:$api_port"  # the private API (the proxy forwards to it)
c.Proxy.address = "127.0.0.1:$proxy_port"  # what clients use: HTTP API and schedulers
c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"
c.SimpleAuthenticator.password = "$password"
c.LocalBackend.clusters_directory = "$DIR/clusters"
# distributed no longer installs dask-scheduler / dask-worker, the server's defaults.
c.ClusterConfig.scheduler_cmd = [os.path.join(bindir, "dask"), "scheduler"]
c.ClusterConfig.worker_cmd = [os.path.join(bindir, "dask"), "worker"]
c.ClusterConfig.worker_cores = 1
c.ClusterConfig.worker_memory = "2 G"
c.ClusterConfig.cluster_max_workers = 4
c.ClusterConfig.idle_timeout = 3600  # a cluster a crashed test left behind goes away
CONF
    cat >"$ENV_FILE" <<ENV
export DASK_GATEWAY__ADDRESS=http://127.0.0.1:$proxy_port
export DASK_GATEWAY__AUTH__TYPE=basic
export DASK_GATEWAY__AUTH__KWARGS__USERNAME=easeml
export DASK_GATEWAY__AUTH__KWARGS__PASSWORD=$password
ENV
    chmod 0600 "$CONFIG" "$ENV_FILE"
}

healthy() {
    # shellcheck disable=SC1090
    local address
    address=$(. "$ENV_FILE" && echo "$DASK_GATEWAY__ADDRESS")
    python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/api/health", timeout=2)' "$address"
}

start() {
    mkdir -p "$DIR"
    if pid_alive; then
        say "already running ($DIR)"
        cat "$ENV_FILE"
        return
    fi
    [[ -f "$CONFIG" && -f "$ENV_FILE" ]] || write_config
    say "starting dask-gateway-server (log: $LOG)"
    # A plain background command (no `a && b &` list, whose subshell would hold our stdout open):
    # $! is the server itself (nohup execs it).
    (
        cd "$DIR"
        nohup dask-gateway-server -f "$CONFIG" >"$LOG" 2>&1 </dev/null &
        echo $! >"$PID_FILE"
    )
    for _ in $(seq 1 120); do
        if healthy >/dev/null 2>&1; then
            cat "$ENV_FILE"
            return
        fi
        pid_alive || die "dask-gateway-server exited; see $LOG"
        sleep 0.25
    done
    die "dask-gateway-server did not answer within 30 s; see $LOG"
}

stop() {
    if ! pid_alive; then
        say "not running"
        rm -f "$PID_FILE"
        return
    fi
    local pid
    pid=$(cat "$PID_FILE")
    kill -TERM "$pid"  # the server stops its clusters on the way out
    for _ in $(seq 1 120); do
        running "$pid" || { rm -f "$PID_FILE"; say "stopped"; return; }
        sleep 0.25
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    say "killed (it did not stop within 30 s)"
}

status() {
    if pid_alive; then
        say "running in $DIR"
        cat "$ENV_FILE"
    else
        say "not running"
        return 3
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    env) [[ -f "$ENV_FILE" ]] && cat "$ENV_FILE" || die "no config in $DIR; run: $0 start" ;;
    *)
        echo "usage: $0 start|stop|status|env" >&2
        exit 2
        ;;
esac
