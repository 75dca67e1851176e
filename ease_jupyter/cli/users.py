"""``easeml users``: user accounts on the service's database (ACAI §3.1).

    easeml users add ada --admin      # prints ada's token, once
    easeml users list
    easeml users revoke ada           # ada's token stops working
    easeml users revoke ada --new-token   # ... and prints a new one
    easeml users admin ada --off      # ada is no admin any more (without --off: she is one)
    easeml users link carol           # hub user carol takes over local account carol
    easeml users delete ada --yes     # ada's account, tasks and data, for good

These are local accounts (an ease.ml token logs them in). In JupyterHub mode
the hub's users are other accounts, even under the same name, until an admin
links them (``link``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from ._data_dir import MEMORY_URL, db_option, existing_store, make_data_dir, require_existing_database, store_errors

_db = db_option()
_dir = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                    help="Default: $EASEML_DATA_DIR or ~/.easeml.")


@contextlib.contextmanager
def _store(db_url, data_dir, doing: str, *, create: bool = False):
    """The store for a users command, closed on exit. Never ``memory://``:
    its users would vanish with this command. ``create`` (``add``): a data
    dir or SQLite database that does not exist yet is made, so that the
    first admin can be added on a fresh machine; otherwise both must exist,
    so that a typo in --data-dir or in a SQLite --db makes no empty store.
    With --db, the database is all it opens: no data dir is needed."""
    if db_url == MEMORY_URL:
        raise click.BadParameter(f"a memory:// store lives in its service's process and vanishes with this "
                                 f"command; nothing to {doing} here: expected the service's database",
                                 param_hint="--db")
    from ease_jupyter.store import default_data_dir, open_store

    if not create and db_url is None:
        with existing_store(db_url, data_dir, doing, force=True) as (store, _, directory):
            with store_errors(db_url, directory):  # the command's own reads and writes too
                yield store
        return
    directory = (data_dir or default_data_dir()).expanduser()
    if db_url is not None:  # its database is all a users command needs: no data dir is made or asked for
        from ease_jupyter.store.sql import SQLStore

        if not create:
            require_existing_database(db_url)
        with store_errors(db_url, directory):
            store = SQLStore(db_url)
            try:
                yield store
            finally:
                store.close()
        return
    directory = make_data_dir(data_dir)  # a usage error where it cannot be made, not the OS's traceback
    with store_errors(db_url, directory):
        store = open_store(db_url, directory)[0]
        try:
            yield store
        finally:
            store.close()


@contextlib.contextmanager
def _naming(db_url, data_dir, doing: str, *, create: bool = False):
    """The store for a command on user NAME, closed on exit: a NAME that is
    no user name is a usage error, an unknown one a plain error."""
    from ease_jupyter.errors import DataError, NotFoundError

    try:
        with _store(db_url, data_dir, doing, create=create) as store:
            yield store
    except DataError as error:
        raise click.BadParameter(f"found {error.found}, expected {error.expected}", param_hint="NAME") from None
    except NotFoundError as error:
        raise click.ClickException(str(error)) from None


@click.group("users")
def command() -> None:
    """Add, list, revoke, make admin, link and delete users of the service."""


@command.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May create users and see everyone's progress.")
@_db
@_dir
def add(name, admin, db_url, data_dir) -> None:
    """Create user NAME and print its token (shown only this once)."""
    from ease_jupyter.errors import AlreadyExistsError
    from ease_jupyter.service.auth import create_user

    with _naming(db_url, data_dir, "add users to", create=True) as store:
        try:
            _, token = create_user(store, name, admin=admin)
        except AlreadyExistsError:
            raise click.ClickException(f"user {name!r} already exists") from None
    click.echo(token)


@command.command("list")
@_db
@_dir
def list_(db_url, data_dir) -> None:
    """List users: name, admin flag, origin (local or hub), creation time."""
    with _store(db_url, data_dir, "list") as store:
        for user in store.list_users():
            click.echo(f"{user.name}\t{'admin' if user.is_admin else 'user'}\t{user.origin}\t"
                       f"{user.created_at.isoformat()}")


@command.command("revoke")
@click.argument("name")
@click.option("--new-token", is_flag=True, help="Give NAME a new token and print it (shown only this once).")
@_db
@_dir
def revoke(name, new_token, db_url, data_dir) -> None:
    """Make the token of local account NAME stop working.

    Its tasks and data stay. A running service that already saw the token
    stops accepting it within its token cache's lifetime (30 s); the API's
    DELETE /users/NAME/tokens acts at once."""
    from ease_jupyter.service.auth import revoke_token

    with _naming(db_url, data_dir, "revoke") as store:
        _, token = revoke_token(store, name, replace=new_token)
    click.echo(token if token else f"the token of {name!r} is revoked", err=not token)


@command.command("admin")
@click.argument("name")
@click.option("--off", is_flag=True, help="Take NAME's admin rights away instead.")
@_db
@_dir
def admin(name, off, db_url, data_dir) -> None:
    """Give local account NAME admin rights; --off takes them away.

    A JupyterHub user's admin rights follow the hub, not this flag. A
    running service applies the change within its token cache's lifetime
    (30 s); the API's PUT /users/NAME {"admin": false} acts at once. This
    command may take the last local admin's rights (it warns): it can give
    them back, as it can on a fresh database."""
    from ease_jupyter.errors import NotFoundError
    from ease_jupyter.service.auth import check_name
    from ease_jupyter.store.base import LOCAL

    with _naming(db_url, data_dir, "change") as store:
        try:
            user = store.user_by_name(check_name("name", name), LOCAL)
        except NotFoundError:
            raise click.ClickException(f"user {name!r}: no local account of that name (a JupyterHub user's "
                                       "admin rights follow the hub)") from None
        store.set_user_admin(user.id, not off)
        admins = [u.name for u in store.list_users() if u.is_admin and u.origin == LOCAL]
    click.echo(f"local account {name!r} is {'no longer ' if off else ''}an admin", err=True)
    if not admins:
        click.echo(f"no local account is an admin now; 'easeml users admin {name}' gives the rights back", err=True)


@command.command("link")
@click.argument("name")
@_db
@_dir
def link(name, db_url, data_dir) -> None:
    """Make local account NAME the account of JupyterHub user NAME.

    The hub user's next login sees the local account's tasks and data, and the
    account's ease.ml token stops working (the hub is how it logs in now).
    Meant for a deployment that ran JupyterHub mode before users had an
    origin: the upgrade made every existing account local.

    A hub account NAME that owns no task (made when NAME logged in after the
    upgrade) trades places with it: it becomes a local account with no token.
    A hub account NAME that owns tasks is never replaced: the command refuses
    and changes nothing.

    A running service sees the link within 30 s (its caches of tokens and of
    hub users), or at once after a restart."""
    from ease_jupyter.errors import AlreadyExistsError, NotFoundError
    from ease_jupyter.service.auth import local_user
    from ease_jupyter.store.base import HUB

    with _naming(db_url, data_dir, "link") as store:
        account = local_user(store, name)
        try:
            replaced = store.user_by_name(name, HUB)
        except NotFoundError:
            replaced = None
        try:
            store.link_user_to_hub(account.id)
        except AlreadyExistsError:
            owned = len(store.list_tasks(store.user_by_name(name, HUB).id))
            if not owned:  # a hub login created the hub account between our look-up and the link
                raise click.ClickException(f"hub user {name!r} logged in meanwhile; run the command again") from None
            raise click.ClickException(
                f"hub user {name!r} already owns {owned} task(s) here, so linking would hide one account's data; "
                f"nothing was changed. Both accounts keep working: hub user {name!r} through the hub, local "
                f"account {name!r} with its ease.ml token ('easeml users revoke {name} --new-token' prints a new "
                "one).") from None
    click.echo(f"local account {name!r} is now hub user {name!r}: its tasks follow the hub login, "
               "its ease.ml token is revoked", err=True)
    if replaced is not None:
        click.echo(f"the empty hub account {name!r} (made at a login before the link) is now a local account "
                   "with no token", err=True)


@command.command("allow-models")
@click.argument("name")
@click.option("--off", is_flag=True, help="Forbid NAME's own models, even where the service allows them.")
@click.option("--hub", is_flag=True, help="NAME is a JupyterHub user, not a local account.")
@_db
@_dir
def allow_models(name, off, hub, db_url, data_dir) -> None:
    """Let user NAME add models of her own (task.add_model, %easeml model),
    whatever the service's --allow-user-models; --off forbids them.

    Her models' code then runs on the shared workers. A running service
    reads the setting at her next request."""
    from ease_jupyter.service.auth import check_name
    from ease_jupyter.service.user_models import set_user_setting
    from ease_jupyter.store.base import HUB, LOCAL

    with _naming(db_url, data_dir, "change") as store:
        user = store.user_by_name(check_name("name", name), HUB if hub else LOCAL)
        set_user_setting(store, user, not off)
    click.echo(f"user {name!r} may {'not ' if off else ''}add models of her own", err=True)


@command.command("delete")
@click.argument("name")
@click.option("--hub", is_flag=True, help="NAME is a JupyterHub user, not a local account.")
@click.option("--yes", is_flag=True, help="Delete without asking (needed where nobody can answer: no terminal).")
@_db
@_dir
def delete(name, hub, yes, db_url, data_dir) -> None:
    """Delete user NAME with all her tasks, models and data, for good.

    Her tasks go as a task deletion takes them (versions, jobs, metrics,
    tags, and the blobs nothing else references: content another user also
    fed stays), then her uploads not fed yet, her budgets, caps and
    settings, her token and her account. Asks for NAME to be typed back
    unless --yes; with no terminal to ask on, it refuses without --yes.

    Needs the data dir (the blobs are there) and no service running on it:
    while one does, delete through it (DELETE /api/v1/users/NAME as an
    admin), which ends her running jobs first and tells its scheduler. A
    deleted hub user gets a new, empty account at her next login."""
    from ease_jupyter.errors import DataError, InvalidStateError, NotFoundError
    from ease_jupyter.service import deletion
    from ease_jupyter.service.arrays import Uploads
    from ease_jupyter.service.auth import check_name
    from ease_jupyter.store.base import HUB, LOCAL

    from ._data_dir import existing_store, no_service_in

    try:
        check_name("name", name)
    except DataError as error:
        raise click.BadParameter(f"found {error.found}, expected {error.expected}", param_hint="NAME") from None
    origin = HUB if hub else LOCAL
    with existing_store(db_url, data_dir, "delete users in", force=True) as (store, blobs, directory):
        with no_service_in(directory, f"delete through it (DELETE /api/v1/users/{name}"
                           f"{'?origin=hub' if hub else ''} as an admin), which ends her running jobs first and tells "
                           f"its scheduler, or stop it first (easeml stop --data-dir {directory})"):
            try:
                user = store.user_by_name(name, origin)
            except NotFoundError:
                kind = "hub user" if hub else "local account"
                other = "" if hub else " (a JupyterHub user? add --hub)"
                raise click.ClickException(f"user {name!r}: no {kind} of that name{other}") from None
            tasks = [t.name for t in store.list_tasks(user.id)]
            if not yes:
                _confirm(name, origin, tasks)
            try:
                out = deletion.delete_user(store, blobs, deletion.NoLoop(), user,
                                           uploads=Uploads.in_data_dir(directory))
            except InvalidStateError as error:
                raise click.ClickException(f"{error}; nothing more was deleted. If no service runs anywhere on this "
                                           "database, a crashed one left the job so: start the service and delete "
                                           f"through it (DELETE /api/v1/users/{name})") from None
    click.echo(f"deleted {origin} user {name!r}: {out['tasks']} task(s)"
               f"{' (' + ', '.join(out['task_names']) + ')' if out['task_names'] else ''}, "
               f"{out['versions']} dataset version(s), {out['jobs']} job(s), {out['blobs_deleted']} stored blob(s) "
               f"({out['bytes_freed']} bytes) off her quota, {out['uploads_deleted']} upload(s) "
               f"({out['upload_bytes_freed']} bytes); her budgets, settings, token and account")


def _confirm(name: str, origin: str, tasks: list[str]) -> None:
    """Ask for NAME to be typed back; a click error unless it is (no input at all: headless)."""
    owned = f"{len(tasks)} task(s) ({', '.join(tasks)})" if tasks else "no tasks"
    try:
        answer = click.prompt(f"Delete {origin} user {name!r} with {owned}, all their dataset versions, models and "
                              "stored data? This cannot be undone. Type the user name to confirm",
                              default="", show_default=False, err=True)
    except click.Abort:  # end of input: nobody to ask (a script, a pipe, a CI job)
        raise click.ClickException(f"cannot ask for a confirmation here (no input); to delete without asking: "
                                   f"easeml users delete {name} --yes") from None
    if answer.strip() != name:
        raise click.ClickException(f"user {name!r} not deleted (the answer was not {name!r})")
