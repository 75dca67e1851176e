# JupyterHub for a group: the hub, its proxy, the ease.ml service (managed by the hub), a
# dask-gateway (registered with the hub) and single-user servers. `deploy/start.sh` starts it on
# one machine and on loopback; it hands every address and secret over in EASEML_DEPLOY_*
# variables. README.md, "Deploying for a group", says what to change for a real deployment
# (PostgreSQL, dask-gateway, KubeSpawner or SlurmSpawner).
import os
import sys

c = get_config()  # noqa: F821


def setting(name: str) -> str:
    value = os.environ.get("EASEML_DEPLOY_" + name)
    if not value:
        sys.exit(f"jupyterhub_config.py: EASEML_DEPLOY_{name} is not set; start the hub with deploy/start.sh")
    return value


state = setting("DIR")  # the deployment's own directory: hub database, homes, logs, secrets
python = os.environ.get("EASEML_DEPLOY_PYTHON") or sys.executable
public_url = f"http://127.0.0.1:{setting('PORT')}"  # the proxy: what browsers and notebooks use
gateway_proxy = setting("GATEWAY_PROXY")  # host:port of dask-gateway's proxy (HTTP API and schedulers)

# -- the hub and its proxy (configurable-http-proxy, started by the hub) ---------------------
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(setting("PORT"))
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(setting("HUB_PORT"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{setting('PROXY_API_PORT')}"
c.JupyterHub.db_url = f"sqlite:///{state}/hub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/hub/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = f"{state}/hub/jupyterhub.pid"

# -- who logs in: any name, one shared password (a real hub uses its own authenticator) -----
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = setting("PASSWORD")
c.Authenticator.allow_all = True
c.Authenticator.admin_users = set(os.environ.get("EASEML_DEPLOY_HUB_ADMINS", "").split())

# -- single-user servers: local processes of the hub's own Unix user, one home each --------
# SimpleLocalProcessSpawner gives no isolation between users on the machine (JupyterHub's
# docs say so); it needs no Unix accounts, which is what a one-machine trial wants.
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = f"{state}/home/{{username}}"
c.Spawner.cmd = [python, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"] if os.getuid() == 0 else []
c.Spawner.start_timeout = 180  # a loaded two-core machine takes a while to import JupyterLab
c.Spawner.http_timeout = 180
c.Spawner.environment = {
    # The service as notebooks reach it: through the hub's proxy. For single-user servers on
    # other hosts (KubeSpawner, SlurmSpawner) use an address of the proxy they can reach (the
    # internal one, e.g. http://proxy-public/services/easeml/); the token a notebook sends is
    # its $JUPYTERHUB_API_TOKEN, accepted for any URL under $JUPYTERHUB_BASE_URL/services/.
    "EASEML_URL": f"{public_url}/services/easeml/",
    # dask-gateway for the users' own clusters (the HTTP API through the hub, schedulers
    # straight to the gateway's proxy).
    "DASK_GATEWAY__ADDRESS": f"{public_url}/services/dask-gateway",
    "DASK_GATEWAY__PROXY_ADDRESS": f"gateway://{gateway_proxy}",
    "DASK_GATEWAY__AUTH__TYPE": "jupyterhub",
    # A kernel's heartbeat to the service (and how soon it registers again after a restart).
    "EASEML_HEARTBEAT_SECONDS": os.environ.get("EASEML_DEPLOY_HEARTBEAT_SECONDS") or "30",
}

# -- services ------------------------------------------------------------------------------
easeml_command = [python, "-m", "ease_jupyter", "serve", "--jupyterhub",
                  # The store (PostgreSQL) comes in $EASEML_DB below: its URL holds a password,
                  # and a command line is readable by every user of the machine (/proc/PID/cmdline).
                  "--data-dir", f"{state}/easeml",  # blobs (partitions, checkpoints, models)
                  "--engine", "gateway",  # a cluster from dask-gateway, shut down when the service stops
                  "--workers", os.environ.get("EASEML_DEPLOY_WORKERS", "1")]
c.JupyterHub.services = [
    {
        # Managed: the hub starts it, restarts it when it exits, and stops it with the hub.
        "name": "easeml",
        "url": f"http://127.0.0.1:{setting('SERVICE_PORT')}",  # where it listens (the proxy's target)
        "command": easeml_command,
        "environment": {
            "EASEML_DB": setting("DB_URL"),  # easeml serve --db, read from the environment
            # The service's own clusters: the gateway's proxy directly, authenticated with the
            # $JUPYTERHUB_API_TOKEN the hub gives this service (role easeml-uses-dask-gateway).
            "DASK_GATEWAY__ADDRESS": f"http://{gateway_proxy}",
            "DASK_GATEWAY__AUTH__TYPE": "jupyterhub",
            "PATH": os.environ.get("PATH", ""),
        },
        "oauth_no_confirm": True,
        "display": False,
        "timeout": 180,  # it listens once its gateway cluster has a worker
    },
    {
        # Not managed: deploy/start.sh runs dask-gateway-server, which checks tokens with the hub.
        "name": "dask-gateway",
        "url": f"http://{gateway_proxy}",
        "api_token": setting("GATEWAY_TOKEN"),
        "display": False,
    },
    {
        # The operator's token (deploy/start.sh keeps it in $EASEML_DEPLOY_DIR/settings.env as
        # EASEML_DEPLOY_ADMIN_TOKEN and prints it as an export line):
        # users, their servers and their tokens through the hub's REST API.
        "name": "deploy-admin",
        "api_token": setting("ADMIN_TOKEN"),
    },
]

# -- rights ----------------------------------------------------------------------------------
# ease.ml admins need not be hub admins: this custom scope makes one (service/hub.py), and the
# group easeml-admins holds it. Hub admins are ease.ml admins as well.
c.JupyterHub.custom_scopes = {
    "custom:easeml:admin": {"description": "Administer the ease.ml service: every user's tasks and the service view."},
}
c.JupyterHub.load_groups = {
    "easeml-admins": {"users": os.environ.get("EASEML_DEPLOY_EASEML_ADMINS", "").split()},
}
c.JupyterHub.load_roles = [
    # Every user may use the ease.ml service and the gateway (the default "self" does not include them).
    {"name": "user", "scopes": ["self", "access:services!service=easeml", "access:services!service=dask-gateway"]},
    # A single-user server's $JUPYTERHUB_API_TOKEN: the same, and the admin scope where its
    # owner has it (a token's scopes are always cut down to its owner's).
    {"name": "server", "scopes": ["users:activity!user", "access:servers!server", "access:services!service=easeml",
                                  "access:services!service=dask-gateway", "custom:easeml:admin"]},
    {"name": "easeml-admin", "scopes": ["custom:easeml:admin"], "groups": ["easeml-admins"]},
    {"name": "easeml-uses-dask-gateway", "scopes": ["access:services!service=dask-gateway"], "services": ["easeml"]},
    {"name": "deploy-admin", "scopes": ["admin:users", "admin:servers", "tokens", "admin:groups", "list:services",
                                        "read:services"], "services": ["deploy-admin"]},
]
c.JupyterHub.log_level = os.environ.get("EASEML_DEPLOY_LOG_LEVEL", "INFO")
