#!/usr/bin/env bash
# A throwaway multi-process Dask cluster on loopback, started with the `dask scheduler`
# and `dask worker` command lines (as a deployment would), for the cluster tests and
# for trying `easeml serve --engine tcp://...` by hand.
#
#   scripts/dask_cluster.sh start    # scheduler + 2 workers; prints the export line
#   scripts/dask_cluster.sh stop     # stop the workers, then the scheduler
#   scripts/dask_cluster.sh status   # running or not, and the address
#   scripts/dask_cluster.sh address  # print the export line only
#
# Typical use:   eval "$(scripts/dask_cluster.sh start)" && easeml serve --engine "$EASEML_TEST_DASK_ADDRESS"
#
# Two workers, one thread each: `cpu` declares no resources, `gpu` declares a (fake, on a
# machine with no GPU) `--resources GPU=1`, so the placement rules can be checked: torch
# units ask for GPU, scikit-learn tasks keep off a GPU worker while a CPU worker exists.
# Only the `export EASEML_TEST_DASK_ADDRESS=tcp://...` line goes to stdout; progress goes
# to stderr. `start` is idempotent.
#
# Settings (environment):
#   EASEML_DASK_DIR           state directory: pid files, scheduler file, logs (default /tmp/easeml-dask)
#   EASEML_DASK_MEMORY        each worker's --memory-limit (default 2GiB)
#   EASEML_DASK_IDLE_TIMEOUT  the scheduler exits after this long with no client and no task
#                             (default: never; the tests set it, so a crashed test run leaves nothing)
set -euo pipefail

DIR="${EASEML_DASK_DIR:-/tmp/easeml-dask}"
MEMORY="${EASEML_DASK_MEMORY:-2GiB}"
SCHEDULER_FILE="$DIR/scheduler.json"
WORKERS=(cpu gpu)

say() { echo "dask_cluster.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

command -v dask >/dev/null 2>&1 || die "no 'dask' command on PATH (pip install 'dask[distributed]')"

running() {  # running PID: alive and not a zombie (a killed orphan may wait a while to be reaped)
    local state
    state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ -n "$state" && "$state" != Z* ]]
}

pid_alive() { [[ -f "$1" ]] && running "$(cat "$1")"; }

address() {
    python -c 'import json, sys; print(json.load(open(sys.argv[1]))["address"])' "$SCHEDULER_FILE"
}

print_address() {
    [[ -f "$SCHEDULER_FILE" ]] || die "no scheduler file in $DIR; run: $0 start"
    echo "export EASEML_TEST_DASK_ADDRESS=$(address)"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local seconds=$1 what=$2
    shift 2
    for _ in $(seq 1 $((seconds * 4))); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.25
    done
    die "$what within $seconds s; see the logs in $DIR"
}

workers_registered() {
    python - "$SCHEDULER_FILE" "${#WORKERS[@]}" <<'PY'
import sys
from distributed import Client
with Client(scheduler_file=sys.argv[1], timeout=5, set_as_default=False) as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=5)
PY
}

start() {
    mkdir -p "$DIR"
    if pid_alive "$DIR/scheduler.pid"; then
        say "scheduler already running ($DIR)"
    else
        rm -f "$SCHEDULER_FILE"
        say "starting the scheduler on 127.0.0.1 (log: $DIR/scheduler.log)"
        local idle=()
        [[ -n "${EASEML_DASK_IDLE_TIMEOUT:-}" ]] && idle=(--idle-timeout "$EASEML_DASK_IDLE_TIMEOUT")
        nohup dask scheduler --host 127.0.0.1 --port 0 --no-dashboard --scheduler-file "$SCHEDULER_FILE" \
            --pid-file "$DIR/scheduler.pid" "${idle[@]}" >"$DIR/scheduler.log" 2>&1 </dev/null &
        wait_for 60 "the scheduler did not write $SCHEDULER_FILE" test -s "$SCHEDULER_FILE"
    fi
    local name resources
    for name in "${WORKERS[@]}"; do
        if pid_alive "$DIR/worker-$name.pid"; then
            continue
        fi
        resources=()
        [[ "$name" == gpu ]] && resources=(--resources "GPU=1")
        say "starting worker $name (log: $DIR/worker-$name.log)"
        # One thread per worker (MOP runs one unit at a time per worker); the nanny
        # restarts it after a crash and sets OMP_NUM_THREADS=1.
        nohup dask worker --scheduler-file "$SCHEDULER_FILE" --name "$name" --nthreads 1 --nanny \
            --memory-limit "$MEMORY" --no-dashboard --host 127.0.0.1 --local-directory "$DIR/work-$name" \
            --death-timeout 60 --pid-file "$DIR/worker-$name.pid" "${resources[@]}" \
            >"$DIR/worker-$name.log" 2>&1 </dev/null &
    done
    wait_for 90 "the workers did not register" workers_registered
    print_address
}

stop_pids() {  # stop_pids GRACE PIDFILE...: TERM them all, KILL what is left after GRACE seconds
    local grace=$1 file pid
    shift
    local pids=()
    for file in "$@"; do
        if pid_alive "$file"; then
            pid=$(cat "$file")
            pids+=("$pid")
            kill -TERM "$pid" 2>/dev/null || true
        fi
        rm -f "$file"
    done
    for _ in $(seq 1 $((grace * 4))); do
        local alive=0
        for pid in "${pids[@]}"; do
            running "$pid" && alive=1
        done
        [[ $alive -eq 1 ]] || return 0
        sleep 0.25
    done
    for pid in "${pids[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
}

stop() {
    local files=() name grace=15
    for name in "${WORKERS[@]}"; do
        files+=("$DIR/worker-$name.pid")
    done
    # Workers whose scheduler is gone spend their grace trying to say goodbye to it.
    pid_alive "$DIR/scheduler.pid" || grace=2
    stop_pids "$grace" "${files[@]}"
    stop_pids 15 "$DIR/scheduler.pid"
    rm -f "$SCHEDULER_FILE"
    say "stopped"
}

status() {
    if pid_alive "$DIR/scheduler.pid"; then
        say "running in $DIR"
        print_address
    else
        say "not running"
        return 3
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    address) print_address ;;
    *)
        echo "usage: $0 start|stop|status|address" >&2
        exit 2
        ;;
esac
