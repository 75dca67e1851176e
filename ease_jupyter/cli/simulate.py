"""``easeml simulate``: replay selection policies on a quality/cost matrix.

The protocol and metrics are ``ease_jupyter.selection.simulator``'s (ease.ml
pvldb §6, arXiv App. A); this module only reads CSV files, reports progress
and writes the JSON.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import click

from ._data_dir import FiniteFloat, writable_dir

DEFAULT_POLICIES = "hybrid,greedy,round_robin,random,spearmint,oracle"
# Sizes of a synthetic matrix: the generator factors a models x models covariance (and, with
# --syn-sigma-u, a users x users one), some seconds at 2000 and minutes, and gigabytes, past it.
MAX_SYN_MODELS = 2000
MAX_SYN_USERS_PER_GROUP = 2000


def _read_matrix(path: Path, what: str):
    """Read a users x models CSV: header ``user,<model>...``, one row per user.

    Empty cells, ``NaN``, ``NA`` and ``--`` are missing values. Returns
    (users, models, float matrix, each user row's line number in the file).
    Raises click.BadParameter naming the cell.
    """
    import csv

    import numpy as np

    param = f"--{what}"
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)  # its line_num: blank lines are skipped, yet messages name the file's line
            numbered = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=param) from None
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path} is not a UTF-8 text CSV file", param_hint=param) from None
    lines, rows = [n for n, _ in numbered], [r for _, r in numbered]
    if len(rows) < 2:
        raise click.BadParameter(f"{path}: expected a header row and at least one user row", param_hint=param)
    header = [c.strip() for c in rows[0]]
    models = header[1:]
    if not models:
        raise click.BadParameter(f"{path}: the header has no model columns (expected: user,<model>,...)",
                                 param_hint=param)
    if _looks_like_values(header):
        raise click.BadParameter(
            f"{path}, line {lines[0]}: found {','.join(header)[:80]!r}, numbers where the model names go; expected "
            "user,<model>,... as the first line (a header naming the models; if your models' names are numbers, "
            "start the line with the word user)", param_hint=param)
    first = _first_duplicate(models)
    if first is not None:
        cols = [k + 2 for k, m in enumerate(models) if m == first]
        raise click.BadParameter(f"{path}, line {lines[0]}: model {first!r} names columns {_and(cols)}, expected "
                                 "each model once in the header", param_hint=param)
    users, values = [], []
    for ln, row in zip(lines[1:], rows[1:]):
        if len(row) != len(header):
            raise click.BadParameter(f"{path}, line {ln}: found {len(row)} fields, expected {len(header)} "
                                     f"(user name + {len(models)} models)", param_hint=param)
        users.append(row[0].strip())
        vals = []
        for col, cell in zip(models, row[1:]):
            cell = cell.strip()
            if cell in ("", "--") or cell.lower() in ("nan", "na"):
                vals.append(math.nan)
                continue
            try:
                v = float(cell)
            except ValueError:
                raise click.BadParameter(f"{path}, line {ln}, column {col!r}: found {cell!r}, expected a number",
                                         param_hint=param) from None
            if not math.isfinite(v):
                raise click.BadParameter(f"{path}, line {ln}, column {col!r}: found {cell!r}, expected a finite number",
                                         param_hint=param)
            vals.append(v)
        values.append(vals)
    first = _first_duplicate(users)
    if first is not None:
        on = [ln for ln, u in zip(lines[1:], users) if u == first]
        raise click.BadParameter(f"{path}: user {first!r} is on lines {_and(on)}, expected each user on one line",
                                 param_hint=param)
    return users, models, np.asarray(values, dtype=float), lines[1:]


_MISSING = ("", "--", "nan", "na")


def _looks_like_values(header: list[str]) -> bool:
    """Whether a header line is a user's row (a file without a header):
    every cell after the first a number or a missing value, at least one a
    number, and the first cell not the word ``user``."""
    if header[0].lower() == "user":
        return False
    numbers = 0
    for cell in header[1:]:
        if cell.lower() in _MISSING:
            continue
        try:
            float(cell)
        except ValueError:
            return False
        numbers += 1
    return numbers > 0


def _first_duplicate(names: list[str]):
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def _and(items) -> str:
    items = [str(x) for x in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _only(a, b, limit: int = 5) -> str:
    """The names of ``a`` not in ``b``, in ``a``'s order, at most ``limit``."""
    missing = [x for x in a if x not in set(b)]
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    return f"{missing[:limit]}{more}"


def _check_quality(path, q, models, lines):
    import numpy as np

    bad = ~np.isnan(q) & ((q < 0) | (q > 1))
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise click.BadParameter(f"{path}, line {lines[i]}, column {models[j]!r}: found {q[i, j]:g}, expected an "
                                 "accuracy in [0, 1]", param_hint="--quality")
    empty = np.all(np.isnan(q), axis=1)
    if empty.any():
        raise click.BadParameter(f"{path}, line {lines[int(np.flatnonzero(empty)[0])]}: found no value, expected "
                                 "at least one quality", param_hint="--quality")


def _align_cost(qpath, cpath, qu, qm, cu, cm, c, q, clines):
    import numpy as np

    if c.shape != q.shape or set(cu) != set(qu) or set(cm) != set(qm):
        diffs = [f"{what} only in {cpath}: {_only(cn, qn)}; only in {qpath}: {_only(qn, cn)}"
                 for what, cn, qn in (("users", cu, qu), ("models", cm, qm)) if set(cn) != set(qn)]
        raise click.BadParameter(
            f"{cpath} has {c.shape[0]} users x {c.shape[1]} models, {qpath} has {q.shape[0]} x {q.shape[1]}; "
            f"{'; '.join(diffs)}; expected the same user and model names", param_hint="--cost")
    order = [cu.index(u) for u in qu]
    c = c[order][:, [cm.index(m) for m in qm]]
    line = [clines[k] for k in order]  # the cost file's line of each user, in the quality file's order
    need = ~np.isnan(q)
    if np.isnan(c[need]).any():
        i, j = map(int, np.argwhere(need & np.isnan(c))[0])
        raise click.BadParameter(f"{cpath}, line {line[i]}, column {qm[j]!r}: found no cost for user {qu[i]!r}, "
                                 "expected one: the model has a quality", param_hint="--cost")
    if np.any(c[need] <= 0):
        i, j = map(int, np.argwhere(need & (c <= 0))[0])
        raise click.BadParameter(f"{cpath}, line {line[i]}, column {qm[j]!r}: found {c[i, j]:g}, expected "
                                 "seconds > 0", param_hint="--cost")
    with np.errstate(over="ignore"):
        total = c[need].sum()
    if not np.isfinite(total):
        raise click.BadParameter(f"{cpath}: found costs up to {c[need].max():g}, whose sum is beyond the largest "
                                 "float; expected costs in a larger unit (divide them all by one number)",
                                 param_hint="--cost")
    return c


def _parse_synthetic(value: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(f"found {value!r}, expected SIGMA_M,ALPHA such as 0.5,1.0",
                                 param_hint="--synthetic") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise click.BadParameter(f"found {value!r}, expected finite numbers SIGMA_M,ALPHA", param_hint="--synthetic")
    if a <= 0:
        raise click.BadParameter("SIGMA_M must be > 0", param_hint="--synthetic")
    return a, b


def _write_csv(path: Path, users, models, m) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        wr = csv.writer(fh)
        wr.writerow(["user", *models])
        for u, row in zip(users, m):
            wr.writerow([u, *[("" if x != x else f"{x:.6g}") for x in row]])


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--quality", "quality_path", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV of accuracies in [0,1]: rows are users (first column the user name), columns models.")
@click.option("--cost", "cost_path", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV of training costs in seconds, same users and models as --quality. "
                   "Without it every run costs 1.")
@click.option("--synthetic", "synthetic", metavar="SIGMA_M,ALPHA",
              help="Instead of --quality/--cost, generate SYN(SIGMA_M, ALPHA) of ease.ml Fig. 8 / arXiv App. B "
                   "(e.g. 0.01,0.1  0.01,1.0  0.5,0.1  0.5,1.0).")
@click.option("--syn-models", default=100, show_default=True, type=click.IntRange(1, MAX_SYN_MODELS),
              help=f"Synthetic: models (at most {MAX_SYN_MODELS}: the generator factors a models x models "
                   "covariance).")
@click.option("--syn-users-per-group", default=100, show_default=True, type=click.IntRange(1, MAX_SYN_USERS_PER_GROUP),
              help="Synthetic: users in each of the two baseline groups (mu_b = 0.75 and 0.25), at most "
                   f"{MAX_SYN_USERS_PER_GROUP}.")
@click.option("--syn-sigma-b", default=0.1, show_default=True, type=FiniteFloat(0),
              help="Synthetic: spread of the baseline quality within a group.")
@click.option("--syn-sigma-u", default=None, type=FiniteFloat(0, min_open=True),
              help="Synthetic: sigma_U of the user-correlation term (off by default).")
@click.option("--syn-sigma-w", default=0.0, show_default=True, type=FiniteFloat(0),
              help="Synthetic: white-noise standard deviation.")
@click.option("--syn-seed", default=0, show_default=True, type=click.IntRange(0), help="Synthetic: generator seed.")
@click.option("--save-matrices", type=click.Path(file_okay=False, path_type=Path),
              help="Synthetic: also write quality.csv and cost.csv into this directory.")
@click.option("--policies", default=DEFAULT_POLICIES, show_default=True,
              help="Comma-separated policies: default (the rule the service uses by default), hybrid, greedy, "
                   "round_robin, random, spearmint, most_cited, most_recent, ...; oracle (a lower bound on the "
                   "time to each loss level), oracle_best (each user's best model), oracle_greedy "
                   "(see docs/selection.md).")
@click.option("--reps", default=50, show_default=True, type=click.IntRange(1), help="Repetitions (random splits).")
@click.option("--budget", default=0.1, show_default=True, type=FiniteFloat(0, 1, min_open=True),
              help="Fraction of the test users' total cost (or runs, cost-oblivious) to spend.")
@click.option("--test-users", default=10, show_default=True, type=click.IntRange(1),
              help="Test users per split; the others form the training set of the GP kernel.")
@click.option("--seed", default=0, show_default=True, type=int, help="Master seed (splits and policies).")
@click.option("--cost-aware/--cost-oblivious", default=True, show_default=True,
              help="Cost-aware: time is cumulative cost and policies see costs. Cost-oblivious: time is runs.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1),
              help="Simulated workers running picks concurrently (beyond the paper).")
@click.option("--jobs", default=1, show_default=True, type=click.IntRange(1),
              help="Processes to run repetitions in.")
@click.option("--json", "json_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the results (JSON).")
@click.option("--quiet", is_flag=True, help="No progress bar or summary.")
def command(quality_path, cost_path, synthetic, syn_models, syn_users_per_group, syn_sigma_b, syn_sigma_u,
            syn_sigma_w, syn_seed, save_matrices, policies, reps, budget, test_users, seed, cost_aware, workers,
            jobs, json_path, quiet):
    """Replay model-selection policies on a quality/cost matrix (ease.ml's protocol).

    Each repetition splits the users at random into --test-users test users
    and a training set; the GP kernel comes from the training users'
    qualities (ease.ml arXiv App. A). Every policy then serves the test users
    until --budget of their total cost is spent, and the average accuracy loss
    is recorded over time. OUT.json holds, per policy, time_to_loss and
    worst_time_to_loss at 0.1/0.05/0.02/0.01, the time from loss 0.1 to each
    lower level, each repetition's times, auc, and the mean loss curve on a
    common grid (fractions of the budget).

    \b
    Examples:
      easeml simulate --quality Q.csv --cost C.csv --json out.json
      easeml simulate --synthetic 0.5,1.0 --cost-oblivious --reps 10 --json syn.json
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small matrices: one BLAS thread is fastest
    writable_dir(json_path.parent, "--json")
    if synthetic is not None and save_matrices is not None:  # before the run, as --json
        writable_dir(save_matrices, "--save-matrices")
    if json_path.is_dir():
        raise click.BadParameter(f"{json_path} is a directory, expected a file path", param_hint="--json")
    from ease_jupyter.selection import make_synthetic, simulate
    from ease_jupyter.selection.simulator import check_policy

    names = [p.strip() for p in policies.split(",") if p.strip()]
    if not names:
        raise click.BadParameter("expected at least one policy", param_hint="--policies")
    for p in names:
        try:
            check_policy(p)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--policies") from None
    if synthetic is not None and (quality_path or cost_path):
        raise click.UsageError("use either --synthetic or --quality/--cost, not both")
    source: dict = {}
    if synthetic is not None:
        sm, al = _parse_synthetic(synthetic)
        q, c = make_synthetic(n_models=syn_models, sigma_m=sm, alpha=al,
                              baseline_groups=((0.75, syn_sigma_b), (0.25, syn_sigma_b)),
                              users_per_group=syn_users_per_group, sigma_u=syn_sigma_u, sigma_w=syn_sigma_w,
                              random_state=syn_seed)
        users = [f"u{i}" for i in range(q.shape[0])]
        models = [f"m{j}" for j in range(q.shape[1])]
        source = {"synthetic": {"sigma_m": sm, "alpha": al, "n_models": syn_models,
                                "users_per_group": syn_users_per_group, "sigma_b": syn_sigma_b,
                                "sigma_u": syn_sigma_u, "sigma_w": syn_sigma_w, "seed": syn_seed}}
        if save_matrices is not None:
            _write_csv(save_matrices / "quality.csv", users, models, q)
            _write_csv(save_matrices / "cost.csv", users, models, c)
    else:
        if quality_path is None:
            raise click.UsageError("missing --quality (or --synthetic)")
        users, models, q, lines = _read_matrix(quality_path, "quality")
        _check_quality(quality_path, q, models, lines)
        c = None
        if cost_path is not None:
            cu, cm, c, clines = _read_matrix(cost_path, "cost")
            c = _align_cost(quality_path, cost_path, users, models, cu, cm, c, q, clines)
        source = {"quality": str(quality_path), "cost": str(cost_path) if cost_path else None}
    if q.shape[0] < test_users + 1:
        raise click.BadParameter(f"the matrix has {q.shape[0]} users; expected at least --test-users + 1 = "
                                 f"{test_users + 1} (one user must remain for the training set)",
                                 param_hint="--test-users")
    if cost_aware and c is None and not quiet:
        click.echo("note: no --cost given, every run costs 1 (cost-aware equals cost-oblivious)", err=True)

    bar = None
    if not quiet:
        from tqdm import tqdm

        bar = tqdm(total=reps, desc="repetitions", unit="rep", file=sys.stderr)
    pool = None
    map_fn = map
    if jobs > 1:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(jobs)
        map_fn = lambda f, it: pool.imap(f, it)  # noqa: E731 - ordered, streamed
    try:
        doc = simulate(q, c, policies=names, reps=reps, budget=budget, n_test=test_users, seed=seed,
                       cost_aware=cost_aware, n_workers=workers, map_fn=map_fn,
                       progress=(lambda r: bar.update(1)) if bar is not None else None)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if pool is not None:
            pool.close()
        if bar is not None:
            bar.close()
    doc["source"] = source
    doc["users"], doc["models"] = len(users), len(models)
    try:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {json_path}: {exc.strerror}") from None
    if not quiet:
        _summary(doc)


def _summary(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    unit = doc["settings"]["time_unit"]
    t = Table(title=f"time to average loss ({unit}); mean over {doc['settings']['reps']} reps; "
                    f"'default' is {doc['settings']['default_policy']}; '-': not reached in every rep")
    for col in ("policy", "0.1", "0.05", "0.02", "0.01", "0.1 -> 0.02", "worst 0.02", "auc"):
        t.add_column(col, justify="right" if col != "policy" else "left")
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    for name, p in doc["policies"].items():
        ttl = p["time_to_loss"]
        t.add_row(name, *(fmt(ttl.get(k)) for k in ("0.1", "0.05", "0.02", "0.01")),
                  fmt(p["time_from_0.1"].get("0.02")), fmt(p["worst_time_to_loss"].get("0.02")), f"{p['auc']:.4f}")
    Console(stderr=True).print(t)
    if "oracle" in doc["policies"]:
        gap = doc["policies"]["oracle"].get("oracle_gap", {}).get("0.02")
        note = ("oracle: a lower bound on each level's time (the cheapest set of runs, exact by milp, "
                "over the number of workers)")
        if gap:
            note += f"; the loss-per-cost greedy costs {gap['mean']:.1%} more on average at 0.02 (max {gap['max']:.1%})"
        if not doc["policies"]["oracle"].get("oracle_lower_bound", True):
            note = "oracle: users arrive or leave, so it ran the loss-per-cost greedy schedule: NOT a lower bound"
        Console(stderr=True).print(note)
