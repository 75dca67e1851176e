"""Fit the GP prior shipped with the package (``ease_jupyter/selection/data/prior.json``).

    python benchmarks/fit_prior.py           # writes the shipped prior
    python benchmarks/fit_prior.py --check   # refits and says whether the file is up to date

A fresh service has no finished tasks of its own, so its selector starts from
this prior and moves to its own history as it grows (``service/loop/prior.py``).
It is App. A's prior (ease.ml arXiv:1708.07308: a model's features are its
qualities on the training users), fitted on the measured matrices in
``benchmarks/data``:

* ``sklearn_quality.csv``: scikit-learn candidates on tasks made from
  scikit-learn's bundled data sets, one column per (candidate, config);
* ``image_quality.csv`` when present: the zoo's torch nets on image tasks,
  one column per (candidate, learning rate).

Columns map onto the service catalogue's keys (``loop.catalogue``): a pick
trains a candidate's whole grid and reports its best config, so a task's
quality for an arm is the max over that candidate's columns. Each matrix is
one block (``loop.prior.fit_blocks``: the kernel fitted by maximising the
log-marginal likelihood, ``ModelPrior``), independent of the other; the
models neither covers keep the descriptor kernel when the service loads the
file. Provenance (source files and their SHA-256, date, how fitted) is
recorded in the file.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import hashlib
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
OUT = ROOT / "ease_jupyter" / "selection" / "data" / "prior.json"
SOURCES = ("sklearn_quality.csv", "image_quality.csv")
SEED = 0

sys.path.insert(0, str(ROOT / "benchmarks"))
from selection import read_csv  # noqa: E402  (the benchmark's own reader)

from ease_jupyter.service.loop import catalogue  # noqa: E402
from ease_jupyter.service.loop.prior import fit_blocks  # noqa: E402


def candidate_of(column: str) -> str:
    """``logreg[C=0.1]`` and ``lenet@lr=0.01`` name the candidates ``logreg`` and ``lenet``."""
    return column.split("[", 1)[0].split("@", 1)[0]


def per_arm(models: list[str], quality: np.ndarray, keys: list[str]) -> np.ndarray:
    """tasks x catalogue: each arm's best column (NaN where the matrix has none)."""
    out = np.full((quality.shape[0], len(keys)), np.nan)
    for j, column in enumerate(models):
        name = candidate_of(column)
        if name in keys:
            k = keys.index(name)
            out[:, k] = np.fmax(out[:, k], quality[:, j])
    return out


def fit(sources: list[Path]) -> dict:
    keys, _ = catalogue()
    blocks, provenance = [], []
    for path in sources:
        users, models, quality = read_csv(path)
        q = per_arm(models, quality, keys)
        k = len(keys)
        # the matrix alone, over a neutral base: its block is what we keep
        mean, cov, fitted = fit_blocks(q, np.zeros(k), np.eye(k), min_tasks=3, random_state=SEED)
        for block in fitted:
            cols = list(block.models)
            blocks.append({"models": [keys[c] for c in cols], "mean": mean[cols].tolist(),
                           "cov": cov[np.ix_(cols, cols)].tolist(), "kernel": repr(block.kernel),
                           "n_tasks": block.n_tasks, "source": f"benchmarks/data/{path.name}"})
        provenance.append({"file": f"benchmarks/data/{path.name}",
                           "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                           "tasks": len(users), "columns": len(models)})
    return {
        "blocks": blocks,
        "provenance": {
            "sources": provenance,
            "fitted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "fitted_by": "benchmarks/fit_prior.py",
            "how": ("per source matrix: columns mapped onto the catalogue's arms (max over a candidate's "
                    "configs), missing cells imputed (row mean + column mean - grand mean), App. A's kernel "
                    "C_off + C_amp*RBF + White on the arms' quality vectors fitted by maximising the "
                    f"log-marginal likelihood (ModelPrior, random_state={SEED}); the blocks are independent"),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="refit and compare with the file; write nothing")
    args = parser.parse_args(argv)
    sources = [DATA / name for name in SOURCES if (DATA / name).exists()]
    fitted = fit(sources)
    if args.check:
        shipped = json.loads(OUT.read_text())
        same = ([p["sha256"] for p in shipped["provenance"]["sources"]]
                == [p["sha256"] for p in fitted["provenance"]["sources"]])
        print("up to date" if same else "the shipped prior was fitted on other data: run without --check")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fitted, indent=1) + "\n")
    for block in fitted["blocks"]:
        order = np.argsort(block["mean"])[::-1]
        print(f"{block['source']}: {block['n_tasks']} tasks; prior mean "
              + ", ".join(f"{block['models'][i]} {block['mean'][i]:.3f}" for i in order))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
