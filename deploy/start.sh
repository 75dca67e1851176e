#!/usr/bin/env bash
# The shared deployment on one machine, on loopback, in one command:
#
#   deploy/start.sh start            # PostgreSQL, dask-gateway, JupyterHub (+ proxy, ease.ml service)
#   deploy/start.sh stop             # stop all of it (data is kept in $EASEML_DEPLOY_DIR)
#   deploy/start.sh status           # what runs, and the export lines
#   deploy/start.sh restart-service  # end the ease.ml service; the hub starts it again
#   deploy/start.sh env              # print the export lines only
#   deploy/start.sh --help
#
# What runs (README.md, "Deploying for a group"):
#   PostgreSQL        the ease.ml store (scripts/postgres.sh, in $EASEML_DEPLOY_DIR/postgres)
#   dask-gateway      the cluster: dask-gateway-server, JupyterHub's authenticator, clusters
#                     as local processes (UnsafeLocalBackend)
#   JupyterHub        deploy/jupyterhub_config.py; it starts configurable-http-proxy, the
#                     ease.ml service as a managed service (easeml serve --jupyterhub --engine
#                     gateway) and single-user servers (SimpleLocalProcessSpawner)
#
# `start` prints export lines on stdout (progress goes to stderr), so
#   eval "$(deploy/start.sh start)"
# sets EASEML_DEPLOY_URL (the hub), EASEML_DEPLOY_ADMIN_TOKEN (a hub API token with the
# admin:users, admin:servers and tokens scopes) and EASEML_DEPLOY_PASSWORD (every user's
# password: SharedPasswordAuthenticator). `start` is idempotent; a second `start` reuses the ports and
# secrets of the first.
#
# Settings (environment; read by the first `start` of a directory, then kept in its settings file):
#   EASEML_DEPLOY_DIR           state: databases, homes, logs, secrets (default
#                               ${XDG_RUNTIME_DIR:-$HOME}/.easeml-deploy; yours alone, mode 700)
#   EASEML_DEPLOY_PORT          the hub's public port (default 8000)
#   EASEML_DEPLOY_PASSWORD      the users' shared password (default: random, printed)
#   EASEML_DEPLOY_HUB_ADMINS    hub admins, space-separated (they are ease.ml admins too)
#   EASEML_DEPLOY_EASEML_ADMINS members of the hub group easeml-admins: ease.ml admins only
#   EASEML_DEPLOY_WORKERS       dask workers of the service's cluster (default 1)
#   EASEML_DEPLOY_HEARTBEAT_SECONDS  notebooks' heartbeat to the service: a kernel registers
#                               again within this after the service restarts (default 30)
#   PYTHON                      the Python with ease_jupyter, jupyterhub, dask-gateway (default: python)
set -euo pipefail
# Everything this script writes (settings.env with the secrets, configs, logs) is the caller's alone.
umask 077

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
PYTHON="${PYTHON:-python}"
DIR="${EASEML_DEPLOY_DIR:-${XDG_RUNTIME_DIR:-$HOME}/.easeml-deploy}"
SETTINGS="$DIR/settings.env"
# Run this checkout's ease_jupyter (the hub passes PYTHONPATH on to its service and to the
# single-user servers), whatever another editable install may point at.
if [[ -d "$ROOT/ease_jupyter" ]]; then
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

say() { echo "start.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

running() {  # running PID: alive and not a zombie
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n "$state" && "$state" != Z* ]]
}

pid_alive() { [[ -f "$1" ]] && running "$(cat "$1")"; }

free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

secret() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }

check_tools() {
    "$PYTHON" -c "import ease_jupyter, jupyterhub, dask_gateway, dask_gateway_server" 2>/dev/null \
        || die "$PYTHON lacks ease_jupyter, jupyterhub or dask-gateway: pip install -e '.[test]' 'jupyterhub>=5' 'dask-gateway-server[local]' dask-gateway"
    "$PYTHON" -c "import jupyterhub, sys; sys.exit(int(jupyterhub.__version__.split('.')[0]) < 6)" \
        || die "jupyterhub $("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)') is too old: pip install 'jupyterhub>=6'"
    command -v configurable-http-proxy >/dev/null || die "no configurable-http-proxy on PATH: run scripts/jupyterhub.sh"
    command -v dask-gateway-server >/dev/null || die "no dask-gateway-server on PATH: pip install 'dask-gateway-server[local]'"
}

private() {  # private PATH: refuse PATH unless it is ours and closed to group and others
    local owner mode
    owner=$(stat -c %u "$1") mode=$(stat -c %a "$1")
    [[ "$owner" == "$(id -u)" ]] \
        || die "$1 belongs to uid $owner, not to you (uid $(id -u)): it holds the deployment's secrets; choose another EASEML_DEPLOY_DIR"
    (( (8#$mode & 8#066) == 0 )) \
        || die "$1 has mode $mode: group or others may read or write it, and it holds the deployment's secrets; run: chmod go-rw $1"
}

write_settings() {  # ports and secrets, chosen once per directory
    mkdir -p -m 700 "$DIR"
    private "$DIR"
    if [[ -f "$SETTINGS" ]]; then
        private "$SETTINGS"
        return
    fi
    say "new deployment in $DIR"
    local ports=() port
    while [[ ${#ports[@]} -lt 5 ]]; do  # five distinct free ports
        port=$(free_port)
        [[ " ${ports[*]} " == *" $port "* ]] || ports+=("$port")
    done
    cat >"$SETTINGS" <<ENV
EASEML_DEPLOY_DIR=$DIR
EASEML_DEPLOY_PORT=${EASEML_DEPLOY_PORT:-8000}
EASEML_DEPLOY_HUB_PORT=${ports[0]}
EASEML_DEPLOY_PROXY_API_PORT=${ports[1]}
EASEML_DEPLOY_SERVICE_PORT=${ports[2]}
EASEML_DEPLOY_GATEWAY_API=127.0.0.1:${ports[3]}
EASEML_DEPLOY_GATEWAY_PROXY=127.0.0.1:${ports[4]}
EASEML_DEPLOY_PASSWORD=${EASEML_DEPLOY_PASSWORD:-$(secret)}
EASEML_DEPLOY_ADMIN_TOKEN=$(secret)$(secret)
EASEML_DEPLOY_GATEWAY_TOKEN=$(secret)$(secret)
EASEML_DEPLOY_HUB_ADMINS="${EASEML_DEPLOY_HUB_ADMINS:-}"
EASEML_DEPLOY_EASEML_ADMINS="${EASEML_DEPLOY_EASEML_ADMINS:-}"
EASEML_DEPLOY_WORKERS=${EASEML_DEPLOY_WORKERS:-1}
EASEML_DEPLOY_HEARTBEAT_SECONDS=${EASEML_DEPLOY_HEARTBEAT_SECONDS:-30}
ENV
}

load_settings() {
    [[ -d "$DIR" && -f "$SETTINGS" ]] || die "no deployment in $DIR; run: $0 start"
    private "$DIR"  # before sourcing: settings.env is run as shell code
    private "$SETTINGS"
    set -a
    # shellcheck disable=SC1090
    . "$SETTINGS"
    set +a
    EASEML_DEPLOY_PYTHON="$(command -v "$PYTHON")"
    export EASEML_DEPLOY_PYTHON
}

print_env() {
    echo "export EASEML_DEPLOY_URL=http://127.0.0.1:$EASEML_DEPLOY_PORT"
    echo "export EASEML_DEPLOY_ADMIN_TOKEN=$EASEML_DEPLOY_ADMIN_TOKEN"
    echo "export EASEML_DEPLOY_PASSWORD=$EASEML_DEPLOY_PASSWORD"
}

# -- PostgreSQL --------------------------------------------------------------------------------
start_postgres() {
    if [[ $(id -u) -eq 0 ]]; then  # scripts/postgres.sh runs the server as `postgres`, which must reach $DIR
        chmod o+x "$DIR"
        runuser -u postgres -- test -x "$DIR" 2>/dev/null \
            || die "the postgres user cannot enter $DIR (a parent directory is closed): choose EASEML_DEPLOY_DIR elsewhere"
    fi
    local line
    line=$(EASEML_PG_DIR="$DIR/postgres" "$ROOT/scripts/postgres.sh" start)
    EASEML_DEPLOY_DB_URL="${line#export EASEML_TEST_POSTGRES_URL=}"
    export EASEML_DEPLOY_DB_URL
}

# -- dask-gateway ------------------------------------------------------------------------------
write_gateway_config() {
    mkdir -p "$DIR/gateway/clusters"
    cat >"$DIR/gateway/dask_gateway_config.py" <<CONF
# Written by deploy/start.sh: the group's dask-gateway, on loopback, behind JupyterHub.
import os
import sys

bindir = os.path.dirname(sys.executable)
c.DaskGateway.address = "$EASEML_DEPLOY_GATEWAY_API"  # the private API (the proxy forwards to it)
c.Proxy.address = "$EASEML_DEPLOY_GATEWAY_PROXY"  # what clients use: HTTP API and schedulers
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.JupyterHubAuthenticator"
c.JupyterHubAuthenticator.jupyterhub_api_url = "http://127.0.0.1:$EASEML_DEPLOY_HUB_PORT/hub/api"
c.JupyterHubAuthenticator.jupyterhub_api_token = "$EASEML_DEPLOY_GATEWAY_TOKEN"
c.JupyterHubAuthenticator.jupyterhub_service_name = "dask-gateway"  # tokens need access:services!service=dask-gateway
# Clusters are local processes of this Unix user; a real deployment uses the Kubernetes,
# Slurm or Yarn backend (README.md, "Deploying for a group").
c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.LocalBackend.clusters_directory = "$DIR/gateway/clusters"
# distributed no longer installs dask-scheduler / dask-worker, the server's defaults.
c.ClusterConfig.scheduler_cmd = [os.path.join(bindir, "dask"), "scheduler"]
c.ClusterConfig.worker_cmd = [os.path.join(bindir, "dask"), "worker"]
c.ClusterConfig.worker_cores = 1
c.ClusterConfig.worker_memory = "2 G"
c.ClusterConfig.cluster_max_workers = 4
c.ClusterConfig.idle_timeout = 3600
CONF
    chmod 0600 "$DIR/gateway/dask_gateway_config.py"
}

gateway_healthy() {
    "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/api/health", timeout=2)' \
        "http://$EASEML_DEPLOY_GATEWAY_PROXY" >/dev/null 2>&1
}

start_gateway() {
    local pid_file="$DIR/gateway/gateway.pid"
    if pid_alive "$pid_file"; then
        say "dask-gateway already running"
        return
    fi
    write_gateway_config
    say "starting dask-gateway-server (log: $DIR/gateway/gateway.log)"
    (
        cd "$DIR/gateway"
        PATH="$(dirname "$EASEML_DEPLOY_PYTHON"):$PATH" nohup "$EASEML_DEPLOY_PYTHON" -m dask_gateway_server \
            -f "$DIR/gateway/dask_gateway_config.py" >"$DIR/gateway/gateway.log" 2>&1 </dev/null &
        echo $! >"$pid_file"
    )
    for _ in $(seq 1 240); do
        gateway_healthy && return
        pid_alive "$pid_file" || die "dask-gateway-server exited; see $DIR/gateway/gateway.log"
        sleep 0.25
    done
    die "dask-gateway-server did not answer within 60 s; see $DIR/gateway/gateway.log"
}

# -- JupyterHub --------------------------------------------------------------------------------
service_healthy() {
    "$PYTHON" -c '
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
    sys.exit(0 if json.loads(r.read()).get("status") == "ok" else 1)' \
        "http://127.0.0.1:$EASEML_DEPLOY_PORT/services/easeml/api/v1/health" >/dev/null 2>&1
}

start_hub() {
    local pid_file="$DIR/hub/hub.pid"  # the hub writes its own jupyterhub.pid too
    mkdir -p "$DIR/hub" "$DIR/home" "$DIR/easeml"
    # The service's data dir (its blobs; the hub and the service run as this user): closed to others even
    # where root opened $DIR to the postgres user (start_postgres), and even if made before under another umask.
    chmod 700 "$DIR/easeml"
    if pid_alive "$pid_file"; then
        say "JupyterHub already running"
    else
        say "starting JupyterHub on http://127.0.0.1:$EASEML_DEPLOY_PORT (log: $DIR/hub/hub.log)"
        (
            cd "$DIR/hub"
            # The hub, its proxy and its services see only this environment, not the caller's EASEML_* tokens.
            env -u EASEML_URL -u EASEML_TOKEN -u JUPYTERHUB_API_TOKEN -u JUPYTERHUB_API_URL \
                PATH="$(dirname "$EASEML_DEPLOY_PYTHON"):$PATH" \
                nohup "$EASEML_DEPLOY_PYTHON" -m jupyterhub -f "$HERE/jupyterhub_config.py" \
                >"$DIR/hub/hub.log" 2>&1 </dev/null &
            echo $! >"$pid_file"
        )
    fi
    for _ in $(seq 1 480); do
        service_healthy && return
        pid_alive "$pid_file" || die "JupyterHub exited; see $DIR/hub/hub.log"
        sleep 0.25
    done
    die "the ease.ml service did not answer through the hub within 120 s; see $DIR/hub/hub.log"
}

service_pids() {  # the ease.ml service: the process whose command line has our data dir
    "$PYTHON" - "$DIR/easeml" <<'PY'
import os, sys
want = sys.argv[1].encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if b"ease_jupyter" in argv and b"serve" in argv and want in argv:
        print(pid)
PY
}

restart_service() {
    pid_alive "$DIR/hub/hub.pid" || die "JupyterHub is not running; run: $0 start"
    local old
    old=$(service_pids)
    [[ -n "$old" ]] || die "no ease.ml service process found"
    say "stopping the ease.ml service (pid $old); the hub starts it again when it next polls (within 30 s)"
    # shellcheck disable=SC2086
    kill -TERM $old
    for _ in $(seq 1 240); do  # first gone ...
        service_healthy || break
        sleep 0.25
    done
    for _ in $(seq 1 480); do  # ... then back, as a new process
        local now
        now=$(service_pids)
        if [[ -n "$now" && "$now" != "$old" ]] && service_healthy; then
            say "the ease.ml service is back (pid $now)"
            return
        fi
        sleep 0.25
    done
    die "the hub did not restart the ease.ml service within 120 s; see $DIR/hub/hub.log"
}

stop_pid() {  # stop_pid PID_FILE NAME: TERM, then KILL after 30 s
    local pid_file=$1 name=$2 pid
    if ! pid_alive "$pid_file"; then
        rm -f "$pid_file"
        return
    fi
    pid=$(cat "$pid_file")
    kill -TERM "$pid"
    for _ in $(seq 1 120); do
        running "$pid" || { rm -f "$pid_file"; say "$name stopped"; return; }
        sleep 0.25
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pid_file"
    say "$name killed (it did not stop within 30 s)"
}

start() {
    check_tools
    write_settings
    load_settings
    start_postgres
    start_gateway
    start_hub
    say "ready: http://127.0.0.1:$EASEML_DEPLOY_PORT (ease.ml at /services/easeml/, dask-gateway at /services/dask-gateway/)"
    print_env
}

stop() {
    load_settings
    # The hub stops its proxy, its managed service (which shuts its gateway cluster down) and
    # the single-user servers (JupyterHub.cleanup_servers).
    stop_pid "$DIR/hub/hub.pid" JupyterHub
    stop_pid "$DIR/gateway/gateway.pid" dask-gateway
    EASEML_PG_DIR="$DIR/postgres" "$ROOT/scripts/postgres.sh" stop || true
}

status() {
    load_settings
    local code=0
    if pid_alive "$DIR/hub/hub.pid"; then say "JupyterHub: running"; else say "JupyterHub: not running"; code=3; fi
    if service_healthy; then say "ease.ml service: answering"; else say "ease.ml service: not answering"; code=3; fi
    if pid_alive "$DIR/gateway/gateway.pid"; then say "dask-gateway: running"; else say "dask-gateway: not running"; code=3; fi
    EASEML_PG_DIR="$DIR/postgres" "$ROOT/scripts/postgres.sh" status >/dev/null 2>&1 \
        && say "PostgreSQL: running" || { say "PostgreSQL: not running"; code=3; }
    print_env
    return $code
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    restart-service) load_settings; restart_service ;;
    env) load_settings; print_env ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
esac
