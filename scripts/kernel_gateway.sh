#!/usr/bin/env bash
# A Jupyter Kernel Gateway and a Jupyter server pointed at it (--gateway-url), on loopback,
# for trying %easeml in a gateway's kernel by hand (docs/gateway.md).
#
#   EASEML_URL=http://127.0.0.1:8000 EASEML_TOKEN=TOKEN scripts/kernel_gateway.sh [JUPYTER ARGS…]
#
# The service's URL and token reach the kernels as KERNEL_EASEML_URL/KERNEL_EASEML_TOKEN
# (recipe 1 of docs/gateway.md: KERNEL_* variables pass both sides unconfigured), and
# KERNEL_EASEML_GATEWAY records the gateway in each notebook's session. JupyterLab (or
# jupyter server, JUPYTER_APP=server) runs in the foreground; the gateway stops with it.
#
# Settings (environment):
#   KG_PORT         the gateway's port (default 8889)
#   JUPYTER_PORT    the Jupyter server's port (default 8888)
#   KG_AUTH_TOKEN   the token the Jupyter server shows the gateway (default: a random one)
#   JUPYTER_APP     lab (default) or server
#   KG_LOG          the gateway's log (default /tmp/easeml-kernel-gateway.log)
set -euo pipefail

say() { echo "kernel_gateway.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

[[ -n "${EASEML_URL:-}" && -n "${EASEML_TOKEN:-}" ]] \
    || die "set EASEML_URL and EASEML_TOKEN (a running 'easeml serve' and a user's token from 'easeml users add')"
python -c "import kernel_gateway" 2>/dev/null || die "jupyter_kernel_gateway is not installed (pip install jupyter_kernel_gateway)"

KG_PORT="${KG_PORT:-8889}"
JUPYTER_PORT="${JUPYTER_PORT:-8888}"
KG_AUTH_TOKEN="${KG_AUTH_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(16))')}"
JUPYTER_APP="${JUPYTER_APP:-lab}"
KG_LOG="${KG_LOG:-/tmp/easeml-kernel-gateway.log}"
GATEWAY_URL="http://127.0.0.1:$KG_PORT"
ROOT_FLAGS=()
[[ "$(id -u)" == 0 ]] && ROOT_FLAGS=(--allow-root)  # jupyter refuses root without it (containers)

# The gateway's kernels get PATH, KERNEL_* and JPY_SESSION_NAME (the notebook's path); the
# gateway's own environment stays with it. It lists its kernels, as jupyter_server expects.
KG_ENV_WHITELIST=JPY_SESSION_NAME KG_AUTH_TOKEN="$KG_AUTH_TOKEN" \
    env -u EASEML_URL -u EASEML_TOKEN \
    python -m kernel_gateway --KernelGatewayApp.ip=127.0.0.1 --KernelGatewayApp.port="$KG_PORT" \
        --KernelGatewayApp.port_retries=0 --JupyterWebsocketPersonality.list_kernels=True >"$KG_LOG" 2>&1 &
GATEWAY_PID=$!
trap 'kill "$GATEWAY_PID" 2>/dev/null || true; wait "$GATEWAY_PID" 2>/dev/null || true' EXIT

for _ in $(seq 1 120); do
    kill -0 "$GATEWAY_PID" 2>/dev/null || die "the gateway exited; see $KG_LOG"
    python - "$GATEWAY_URL" "$KG_AUTH_TOKEN" <<'EOF' 2>/dev/null && break
import sys, urllib.request
request = urllib.request.Request(sys.argv[1] + "/api/kernelspecs", headers={"Authorization": "token " + sys.argv[2]})
urllib.request.urlopen(request, timeout=2)
EOF
    sleep 0.5
done
say "gateway on $GATEWAY_URL (log $KG_LOG); starting jupyter $JUPYTER_APP on port $JUPYTER_PORT"

KERNEL_EASEML_URL="$EASEML_URL" KERNEL_EASEML_TOKEN="$EASEML_TOKEN" KERNEL_EASEML_GATEWAY="$GATEWAY_URL" \
    jupyter "$JUPYTER_APP" --ServerApp.ip=127.0.0.1 --ServerApp.port="$JUPYTER_PORT" \
        --gateway-url="$GATEWAY_URL" --GatewayClient.auth_token="$KG_AUTH_TOKEN" \
        --GatewayClient.allowed_envs=JPY_SESSION_NAME "${ROOT_FLAGS[@]}" "$@"
