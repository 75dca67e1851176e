"""Benchmark of multi-tenant model selection (issue #3): ease.ml's protocol on
real and synthetic quality/cost matrices, the beyond-the-paper extensions, and
the decision latency per pick.

    python benchmarks/selection.py            # full: 50 repetitions (~10-20 min on 2 cores)
    python benchmarks/selection.py --quick    # < 1 minute: few repetitions, a subset

Writes benchmarks/results/selection.json, selection.png, selection.html and
selection.md (the tables quoted in docs/selection.md); --quick writes
selection_quick.* instead. Matrices built here are
cached as CSV under benchmarks/data/.

Matrices
--------
* ``delgado-uniform``: Fernandez-Delgado et al. (JMLR 2014) accuracies, 121
  data sets x 179 classifiers (../shared/benchdata). The table has no cost, so
  costs are i.i.d. U(0.01, 1), exactly what ease.ml did for this table
  ("we generate synthetic costs from the uniform distribution U(0, 1)").
  SYNTHETIC cost.
* ``delgado-tier``: the same accuracies with a deterministic cost PROXY: a
  complexity tier of the classifier's family read from its name (ensembles 10,
  neural nets 20, SVMs 5, lazy/kNN 2, linear / Bayes / single trees 1, other
  3; table ``TIERS`` below), identical for every data set because data-set
  sizes are not in the table. NOT measured.
* ``sklearn-measured``: accuracies and MEASURED fit times (seconds) of the
  zoo's scikit-learn configs (``ease_jupyter.zoo.candidates``; a labelled local
  list if the zoo is not importable) on tasks derived from the data sets
  scikit-learn ships (digits, breast_cancer, wine, iris, diabetes).
* ``SYN(sigma_M, alpha)``: ease.ml's synthetic generator (arXiv App. B), the
  four data sets of Figure 8, with U(0.01, 1) costs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small matrices: one BLAS thread is fastest
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import multiprocessing as mp
import platform
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ease_jupyter.selection import (ModelPrior, Selector, make_synthetic, simulate,  # noqa: E402
                                    SYN_FIGURE8)

DATA = ROOT / "benchmarks" / "data"
RESULTS = ROOT / "benchmarks" / "results"
BENCHDATA = ROOT.parent / "shared" / "benchdata"

MAIN_POLICIES = ["hybrid", "greedy", "round_robin", "random", "spearmint", "most_cited", "most_recent",
                 "ei_greedy", "oracle", "oracle_greedy", "hybrid_ei"]
QUICK_POLICIES = ["hybrid", "round_robin", "random", "spearmint", "ei_greedy", "oracle", "oracle_greedy", "hybrid_ei"]
# The paper's HYBRID and, beyond the paper, HYBRID with SPEARMINT*'s EI-per-second model chooser, each
# measured against the same targets on the same splits (the default stays the paper's HYBRID)
SIDE_BY_SIDE = ["hybrid", "hybrid_ei"]
# pvldb §6.2 reads its headline figure (9.8x) as the time to take the average loss "down from 0.1 to 0.02"
LEVELS = (0.1, 0.05, 0.02, 0.01)
BASELINES = ["round_robin", "random", "spearmint", "most_cited", "most_recent", "greedy", "ei_greedy"]
TARGET_BASELINES = ["round_robin", "random", "spearmint"]
# The GP-UCB policies, also run with the previous ``arms="untried"`` (a model is never trained twice) on the
# same splits and seeds; the default is the paper's ``arms="all"`` (pvldb Alg. 1 line 4, Alg. 2 line 10).
UCB_POLICIES = ["hybrid", "greedy", "round_robin", "random"]
LEVEL = "0.02"


# ---------------------------------------------------------------------------- matrices
def load_delgado(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """(data sets, classifiers, accuracy in [0,1] with NaN for '--')."""
    names, users, rows = None, [], []
    for line in path.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        if names is None:
            names = parts[1:-4]  # drop min max mean std
            continue
        if parts[0].startswith("---") or parts[0] in ("mean", "std"):
            continue
        vals = [math.nan if v == "--" else float(v) / 100.0 for v in parts[1:1 + len(names)]]
        users.append(parts[0])
        rows.append(vals)
    return users, names, np.asarray(rows)


# (regex on the classifier name, tier) - first match wins; a cost PROXY, not a measurement
TIERS: list[tuple[str, float]] = [
    (r"nnet|NNet|mlp|MLP|Perceptron|rbf|RBF|dkp|elm|Elm|mxnet|dnn|lvq", 20.0),
    (r"^(rf|RRF|parRF|cforest|rotationForest|RotationForest)|Forest|Bagging|bag|Boost|boost|gbm|ada|"
     r"C5\.0_|Decorate|Dagging|Ensemble|Grading|Stacking|Vote|MultiScheme|RandomCommittee|RandomSubSpace|"
     r"END|EnsembleSelection|FilteredClassifier|ClassificationViaRegression|ClassificationViaClustering", 10.0),
    (r"svm|SVM|SMO|LibSVM|lssvm", 5.0),
    (r"LWL|KStar", 5.0),
    (r"knn|IBk|kknn|IB1|NNge", 2.0),
    (r"lda|LDA|qda|glm|Logistic|logistic|NaiveBayes|nb|multinom|pls|mda|fda|rda|sda|hdda|slda|lvq|pam|"
     r"OneR|ZeroR|DecisionStump|J48|rpart|ctree|PART|JRip|REPTree|DecisionTable|Ridor|C5\.0Tree|C5\.0Rules|"
     r"NBTree|SimpleCart|BFTree|LMT|HyperPipes|VFI|ConjunctiveRule|DTNB|JRip|obliqueTree|treebag", 1.0),
]


def tier_cost(classifier: str) -> float:
    for pattern, tier in TIERS:
        if re.search(pattern, classifier):
            return tier
    return 3.0


def delgado_matrices(seed: int = 0) -> dict[str, dict]:
    path = BENCHDATA / "delgado2014_results.txt"
    if not path.exists():
        return {}
    users, models, q = load_delgado(path)
    rng = np.random.default_rng(seed)
    uniform = np.where(np.isnan(q), np.nan, rng.uniform(0.01, 1.0, q.shape))
    tiers = np.array([tier_cost(m) for m in models])
    tier = np.where(np.isnan(q), np.nan, np.broadcast_to(tiers, q.shape))
    common = {"quality": q, "users": users, "models": models,
              "quality_source": "Fernandez-Delgado et al. 2014, ../shared/benchdata/delgado2014_results.txt"}
    return {
        "delgado-uniform": {**common, "cost": uniform,
                            "cost_source": "SYNTHETIC: i.i.d. U(0.01, 1) per cell, as ease.ml did for this table"},
        "delgado-tier": {**common, "cost": tier,
                         "cost_source": "PROXY (not measured): complexity tier of the classifier family "
                                        "(TIERS in benchmarks/selection.py), the same for every data set"},
    }


def write_csv(path: Path, users, models, m) -> None:
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        wr = csv.writer(fh)
        wr.writerow(["user", *models])
        for u, row in zip(users, m):
            wr.writerow([u, *("" if x != x else f"{x:.6g}" for x in row)])


def read_csv(path: Path):
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    models = rows[0][1:]
    users = [r[0] for r in rows[1:]]
    vals = [[math.nan if v == "" else float(v) for v in r[1:]] for r in rows[1:]]
    return users, models, np.asarray(vals)


def syn_matrices(quick: bool) -> dict[str, dict]:
    out = {}
    pairs = [(0.5, 1.0)] if quick else list(SYN_FIGURE8)
    for sm, al in pairs:
        name = f"SYN({sm:g},{al:g})"
        qf, cf = DATA / f"syn_{sm:g}_{al:g}_quality.csv", DATA / f"syn_{sm:g}_{al:g}_cost.csv"
        if qf.exists() and cf.exists():
            users, models, q = read_csv(qf)
            _, _, c = read_csv(cf)
        else:
            q, c = make_synthetic(sigma_m=sm, alpha=al, random_state=0)
            users = [f"u{i}" for i in range(q.shape[0])]
            models = [f"m{j}" for j in range(q.shape[1])]
            write_csv(qf, users, models, q)
            write_csv(cf, users, models, c)
        out[name] = {"quality": q, "cost": c, "users": users, "models": models,
                     "quality_source": f"SYNTHETIC: arXiv App. B generator, sigma_M={sm}, alpha={alpha_str(al)}, seed 0",
                     "cost_source": "SYNTHETIC: i.i.d. U(0.01, 1)"}
    return out


def alpha_str(a: float) -> str:
    return f"{a:g}"


# -- the scikit-learn matrix -------------------------------------------------------------
def sklearn_tasks():
    """28 classification tasks ("users") derived from the data sets scikit-learn ships."""
    from sklearn import datasets

    tasks = []
    d = datasets.load_digits()
    X, y = d.data, d.target
    for a, b in [(0, 1), (1, 7), (3, 8), (4, 9), (5, 6), (2, 3), (7, 9), (0, 6), (3, 5), (8, 9)]:
        m = (y == a) | (y == b)
        tasks.append((f"digits_{a}v{b}", X[m], (y[m] == b).astype(int)))
    m = y < 5
    tasks.append(("digits_0-4", X[m], y[m]))
    tasks.append(("digits_5-9", X[~m], y[~m] - 5))
    tasks.append(("digits_even_odd", X, y % 2))
    tasks.append(("digits_all", X, y))
    small = X.reshape(-1, 8, 8).reshape(-1, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(-1, 16)
    tasks.append(("digits_4x4_all", small, y))
    bc = datasets.load_breast_cancer()
    tasks.append(("cancer_all", bc.data, bc.target))
    tasks.append(("cancer_mean10", bc.data[:, :10], bc.target))
    tasks.append(("cancer_se10", bc.data[:, 10:20], bc.target))
    tasks.append(("cancer_worst10", bc.data[:, 20:], bc.target))
    w = datasets.load_wine()
    tasks.append(("wine_all", w.data, w.target))
    tasks.append(("wine_first5", w.data[:, :5], w.target))
    m = w.target < 2
    tasks.append(("wine_0v1", w.data[m], w.target[m]))
    ir = datasets.load_iris()
    tasks.append(("iris_all", ir.data, ir.target))
    tasks.append(("iris_petal", ir.data[:, 2:], ir.target))
    tasks.append(("iris_sepal", ir.data[:, :2], ir.target))
    m = ir.target > 0
    tasks.append(("iris_versi_virg", ir.data[m], ir.target[m] - 1))
    db = datasets.load_diabetes()
    yb = (db.target > np.median(db.target)).astype(int)
    tasks.append(("diabetes_high", db.data, yb))
    tasks.append(("diabetes_first5", db.data[:, :5], yb))
    return tasks


def local_models(n_classes: int):
    """FALLBACK (used only when ease_jupyter.zoo is not importable): a local list of estimators."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    out = {}
    for C in (0.1, 1.0, 10.0):
        out[f"local_logreg[C={C}]"] = lambda C=C: make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=300))
        out[f"local_svm_rbf[C={C}]"] = lambda C=C: make_pipeline(StandardScaler(), SVC(C=C))
    for k in (3, 7, 15):
        out[f"local_knn[k={k}]"] = lambda k=k: make_pipeline(StandardScaler(), KNeighborsClassifier(k))
    out["local_rf"] = lambda: RandomForestClassifier(200, random_state=0)
    out["local_hgb"] = lambda: HistGradientBoostingClassifier(random_state=0)
    out["local_mlp"] = lambda: make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=300, random_state=0))
    return out


def zoo_models(n_features: int, n_classes: int):
    """The zoo's scikit-learn candidates for ``input: [F] output: [D]``, one entry per config."""
    from ease_jupyter.schema.parser import parse
    from ease_jupyter.zoo import Engine, candidates

    prog = parse(f"input: [{n_features}] output: [{max(n_classes, 2)}]")
    out = {}
    for cand in candidates(prog):
        if cand.engine is not Engine.SKLEARN:
            continue
        for cfg in cand.configs:
            out[cfg.key] = (lambda cand=cand, cfg=cfg: cand.build(cfg))
    return out


def build_sklearn_matrix(log) -> dict:
    """Train every candidate on every task; quality = held-out accuracy, cost = measured fit seconds."""
    from sklearn.model_selection import train_test_split

    qf, cf, mf = DATA / "sklearn_quality.csv", DATA / "sklearn_cost.csv", DATA / "sklearn_meta.json"
    if qf.exists() and cf.exists() and mf.exists():
        users, models, q = read_csv(qf)
        _, _, c = read_csv(cf)
        meta = json.loads(mf.read_text())
        return {"quality": q, "cost": c, "users": users, "models": models, **meta}
    try:
        zoo_models(4, 2)
        source = "ease_jupyter.zoo.candidates (scikit-learn engine), one model per config"
        factory = zoo_models
    except Exception as exc:  # the zoo is written concurrently; fall back, clearly labelled
        log(f"zoo not importable ({exc!r}); using the LOCAL FALLBACK estimator list")
        source = "LOCAL FALLBACK estimator list in benchmarks/selection.py (the zoo was not importable)"
        factory = lambda f, k: local_models(k)  # noqa: E731
    tasks = sklearn_tasks()
    models = None
    Q, C = [], []
    t_start = time.time()
    for name, X, y in tasks:
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
        ms = factory(X.shape[1], int(len(np.unique(y))))
        if models is None:
            models = list(ms)
        qrow, crow = [], []
        for key in models:
            est = ms[key]()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                est.fit(Xtr, ytr)
                dt = time.perf_counter() - t0
                acc = float(np.mean(est.predict(Xte) == yte))
            qrow.append(acc)
            crow.append(max(dt, 1e-4))
        Q.append(qrow)
        C.append(crow)
        log(f"  sklearn task {name}: best acc {max(qrow):.3f}, fit seconds {min(crow):.3g}..{max(crow):.3g}")
    users = [t[0] for t in tasks]
    q, c = np.asarray(Q), np.asarray(C)
    write_csv(qf, users, models, q)
    write_csv(cf, users, models, c)
    import sklearn

    meta = {"quality_source": "held-out accuracy (stratified 30% test split, seed 0) of each model on "
                              "tasks derived from scikit-learn's bundled data sets",
            "cost_source": "MEASURED: wall-clock fit time in seconds (one run, one BLAS thread, a shared "
                           "2-core machine, so some noise)",
            "model_source": source, "sklearn_version": sklearn.__version__,
            "build_seconds": round(time.time() - t_start, 1)}
    mf.write_text(json.dumps(meta, indent=1) + "\n")
    return {"quality": q, "cost": c, "users": users, "models": models, **meta}


# ---------------------------------------------------------------------------- analysis
def ratio(num: dict, den: dict, level: str = LEVEL) -> dict:
    """time_to_loss(num) / time_to_loss(den), read where each policy's MEAN loss
    curve (over repetitions; the curve the paper plots) first reaches ``level``.

    A policy whose mean curve never gets there within the budget has an
    unknown time larger than its budget: the ratio is then a bound.
    """
    a, b = num["time_to_loss_mean_curve"][level], den["time_to_loss_mean_curve"][level]
    A = a if a is not None else num["mean_budget"]
    B = b if b is not None else den["mean_budget"]
    kind = {(True, True): "exact", (False, True): "lower_bound", (True, False): "upper_bound",
            (False, False): "both_censored"}[(a is not None, b is not None)]
    return {"value": A / B, "kind": kind}


def ratio_design(num: dict, den: dict, level: str = LEVEL) -> dict:
    """The same ratio with DESIGN.md's ``time_to_loss``: the mean over
    repetitions of each repetition's first time at the level. When some
    repetitions miss the level, the censored mean (misses count as the budget)
    is a lower bound on that policy's time."""
    a, b = num["time_to_loss"][level], den["time_to_loss"][level]
    A = a if a is not None else num["time_to_loss_censored"][level]
    B = b if b is not None else den["time_to_loss_censored"][level]
    kind = {(True, True): "exact", (False, True): "lower_bound", (True, False): "upper_bound",
            (False, False): "both_censored"}[(a is not None, b is not None)]
    return {"value": A / B if B > 0 else float("nan"), "kind": kind}


def interval_ratio(num: dict, den: dict, hi: str = "0.1", lo: str = LEVEL) -> dict | None:
    """pvldb §6.2's measure: the time each mean curve takes from loss ``hi`` down to ``lo``,
    num over den. None when a curve does not get to ``lo`` within the budget."""
    tn, td = num["time_to_loss_mean_curve"], den["time_to_loss_mean_curve"]
    if None in (tn.get(hi), tn.get(lo), td.get(hi), td.get(lo)):
        return None
    dn, dd = tn[lo] - tn[hi], td[lo] - td[hi]
    return {"value": dn / dd if dd > 0 else float("inf"), "kind": "exact"}


def fmt_ratio(r: dict) -> str:
    v = r["value"]
    return {"exact": f"{v:.2f}", "lower_bound": f">= {v:.2f}", "upper_bound": f"<= {v:.2f}",
            "both_censored": f"~{v:.2f}*"}[r["kind"]]


def analyse(doc: dict) -> dict:
    P = doc["policies"]
    out = {"baseline_over_hybrid": {}, "hybrid_over_oracle": None}
    if "hybrid" not in P:
        return out
    for b in BASELINES:
        if b in P:
            out["baseline_over_hybrid"][b] = ratio(P[b], P["hybrid"])
    for o in ("oracle", "oracle_greedy"):
        if o in P:
            out[f"hybrid_over_{o}"] = ratio(P["hybrid"], P[o])
    out["side_by_side"] = {}
    for ref in SIDE_BY_SIDE:
        if ref not in P:
            continue
        sb = {f"{b}/{ref}": ratio(P[b], P[ref]) for b in TARGET_BASELINES if b in P}
        if "oracle" in P:
            sb[f"{ref}/oracle"] = ratio(P[ref], P["oracle"])
        if "oracle_greedy" in P:
            sb[f"{ref}/oracle_greedy"] = ratio(P[ref], P["oracle_greedy"])
        if "0.1" in P[ref]["time_to_loss_mean_curve"]:  # the paper's interval: from loss 0.1 down to 0.02
            sb["interval_0.1_to_0.02"] = {b: interval_ratio(P[b], P[ref]) for b in TARGET_BASELINES if b in P}
        out["side_by_side"][ref] = sb
    out["design"] = {f"{b}/H": ratio_design(P[b], P["hybrid"]) for b in TARGET_BASELINES if b in P}
    if "oracle" in P:
        out["design"]["H/oracle"] = ratio_design(P["hybrid"], P["oracle"])
    out["hybrid_switched"] = P["hybrid"].get("hybrid_switched")
    tb = [b for b in TARGET_BASELINES if b in P]
    rs = [out["baseline_over_hybrid"][b] for b in tb]
    out["target_1.5x"] = all(r["value"] >= 1.5 and r["kind"] in ("exact", "lower_bound") for r in rs) if rs else None
    ho = out.get("hybrid_over_oracle")
    out["target_within_2x_oracle"] = (ho["value"] <= 2.0 and ho["kind"] in ("exact", "upper_bound")) if ho else None
    return out


# ---------------------------------------------------------------------------- latency
def measure_latency(n_users: int, n_models: int = 200, picks: int = 300, refit_picks: int = 100,
                    seed: int = 0) -> dict:
    """Per-pick decision latency (next_picks(1) + observe) of the Selector, and of
    the same pick followed by a refit of the observed user's GP from scratch
    (scikit-learn GaussianProcessRegressor: fixed kernel, and with its
    hyperparameter optimiser)."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    q, c = make_synthetic(n_models=n_models, sigma_m=0.5, alpha=0.3, users_per_group=(n_users + 200) // 2 + 1,
                          random_state=seed)
    hist, act, cost = q[:200], q[200:200 + n_users], c[200:200 + n_users]
    t0 = time.perf_counter()
    prior = ModelPrior(random_state=seed).fit(hist)
    t_prior = time.perf_counter() - t0
    sel = Selector([str(j) for j in range(n_models)], prior=prior, random_state=seed)
    for i in range(n_users):
        sel.add_user(str(i), costs=cost[i])
    for _ in range(3 * n_users):  # warm state: everyone has a few observations
        (pick,) = sel.next_picks(1)
        sel.observe(pick.user, pick.model, act[int(pick.user), int(pick.model)])

    def one(refit: str | None) -> float:
        t = time.perf_counter()
        (pick,) = sel.next_picks(1)
        u = pick.user
        sel.observe(u, pick.model, act[int(u), int(pick.model)])
        if refit is not None:
            gp = sel._users[u].gp  # the benchmark peeks at the state to time the naive alternative
            X = prior.features_[gp.models]
            S = np.asarray(gp.X_obs_)
            y = np.asarray(gp.y_obs_) - gp.m0_[S]
            gpr = GaussianProcessRegressor(prior.kernel_, alpha=prior.alpha,
                                           optimizer=None if refit == "fixed" else "fmin_l_bfgs_b")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gpr.fit(X[S], y)
            mu, sd = gpr.predict(X, return_std=True)
            gp.mean_[:] = mu + gp.m0_
            gp.var_[:] = sd ** 2
        return (time.perf_counter() - t) * 1e3

    inc = np.array([one(None) for _ in range(picks)])
    fixed = np.array([one("fixed") for _ in range(refit_picks)])
    hyper = np.array([one("hyper") for _ in range(max(refit_picks // 4, 10))])
    pct = lambda a, p: float(np.percentile(a, p))  # noqa: E731
    return {"p50": pct(inc, 50), "p99": pct(inc, 99),
            "refit_p50": pct(fixed, 50), "refit_p99": pct(fixed, 99),
            "refit_hyperparameters_p50": pct(hyper, 50), "refit_hyperparameters_p99": pct(hyper, 99),
            "refit_over_incremental_p50": pct(fixed, 50) / pct(inc, 50),
            "picks_measured": int(picks), "prior_fit_seconds": t_prior,
            "definition": "ms per pick = Selector.next_picks(1) + observe(); refit = the same plus a "
                          "scikit-learn GaussianProcessRegressor refit of the observed user's GP and a "
                          "predict over her 200 models (fixed kernel; and with the LML optimiser)"}


# ---------------------------------------------------------------------------- plots
def plot(results: dict, path_png: Path, path_html: Path) -> None:
    runs = [(m, mode, d) for m, v in results["matrices"].items() for mode, d in v["runs"].items()]
    if not runs:
        return
    ncol = 2
    nrow = math.ceil(len(runs) / ncol)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(nrow, ncol, figsize=(12, 3.2 * nrow), squeeze=False)
        for ax, (m, mode, d) in zip(axes.flat, runs):
            g = np.asarray(d["grid"]) * 100
            for name, curve in d["curves"].items():
                ls = "--" if name.startswith("oracle") else "-"
                lw = 2.2 if name == "hybrid" else 1.2
                ax.plot(g, np.maximum(curve, 1e-4), ls, lw=lw, label=name)
            ax.axhline(0.02, color="grey", lw=0.6, ls=":")
            ax.set_yscale("log")
            ax.set_title(f"{m} ({mode})", fontsize=9)
            ax.set_xlabel("% of budget" + (" (cost)" if mode == "cost_aware" else " (runs)"), fontsize=8)
            ax.set_ylabel("mean accuracy loss", fontsize=8)
        for ax in list(axes.flat)[len(runs):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(path_png, dpi=110)
        plt.close(fig)
    except ImportError:
        print("matplotlib missing: no PNG", file=sys.stderr)
    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(rows=nrow, cols=ncol, subplot_titles=[f"{m} ({mode})" for m, mode, _ in runs])
        colors = {}
        palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"]
        for k, (m, mode, d) in enumerate(runs):
            r, cc = k // ncol + 1, k % ncol + 1
            g = np.asarray(d["grid"]) * 100
            for name, curve in d["curves"].items():
                col = colors.setdefault(name, palette[len(colors) % len(palette)])
                fig.add_trace(go.Scatter(x=g, y=np.maximum(curve, 1e-4), name=name, legendgroup=name,
                                         showlegend=(k == 0), line=dict(color=col, width=3 if name == "hybrid" else 1.5,
                                                                        dash="dash" if name.startswith("oracle") else None)),
                              row=r, col=cc)
            fig.update_yaxes(type="log", row=r, col=cc)
        fig.update_layout(height=330 * nrow, title="Mean accuracy loss vs % of budget (ease.ml protocol)")
        fig.write_html(path_html, include_plotlyjs="cdn")
    except ImportError:
        print("plotly missing: no HTML", file=sys.stderr)


# ---------------------------------------------------------------------------- report
def md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def md_header(columns: list[str]) -> list[str]:
    """A markdown table's header row and its rule."""
    return [md_row(columns), "|" + "---|" * len(columns)]


def markdown(results: dict) -> str:
    lines = ["<!-- generated by benchmarks/selection.py; do not edit -->", ""]
    s = results["meta"]
    lines.append(f"Repetitions: {s['reps']} (extensions: {s['ext_reps']}), 10 test users, budget 10 %, seed {s['seed']}"
                 f"{' (QUICK mode)' if s['quick'] else ''}.")
    lines.append("")
    lines.append("### time_to_loss(0.02): each baseline / HYBRID, and HYBRID / ORACLE")
    lines.append("")
    hdr = ["matrix", "mode", "HYBRID t(0.02)"] + [f"{b} / H" for b in BASELINES] + ["H / oracle", "H / oracle_greedy",
                                                                                     "1.5x target", "2x oracle"]
    lines += md_header(hdr)
    for m, v in results["matrices"].items():
        for mode, d in v["runs"].items():
            a = v["analysis"][mode]
            h = d["policies"].get("hybrid")
            if h is None:
                continue
            ht = h["time_to_loss_mean_curve"][LEVEL]
            cells = [m, mode, f"{ht:.4g}" if ht is not None else f"> {h['mean_budget']:.4g}"]
            for b in BASELINES:
                r = a["baseline_over_hybrid"].get(b)
                cells.append(fmt_ratio(r) if r else "")
            for o in ("oracle", "oracle_greedy"):
                r = a.get(f"hybrid_over_{o}")
                cells.append(fmt_ratio(r) if r else "")
            t1, t2 = a.get("target_1.5x"), a.get("target_within_2x_oracle")
            cells.append("" if t1 is None else ("met" if t1 else "NOT met"))
            cells.append("" if t2 is None else ("met" if t2 else "NOT met"))
            lines.append(md_row(cells))
    lines.append("")
    lines.append("Times are read where each policy's mean loss curve (over repetitions) first reaches 0.02. "
                 "`>= x`: the baseline's mean curve never reaches 0.02 within the budget (its budget is used: a lower "
                 "bound). `<= x`: the same for HYBRID. `~x*`: neither reaches it (ratio of budgets, uninformative). "
                 "`ei_greedy / H` compares a beyond-the-paper policy, not a baseline.")
    lines.append("")
    lines.append("### Side by side: the paper's HYBRID and HYBRID with EI per second (beyond the paper)")
    lines.append("")
    lines.append("`hybrid_ei` keeps HYBRID's user picker unchanged (GREEDY's candidate set and UCB gap, the switch to "
                 "round robin) and chooses the user's model by SPEARMINT*'s EI per unit cost. Same splits and seeds. "
                 "Ratios of t(0.02) read off the mean loss curves; 'interval' is pvldb §6.2's measure, the time from "
                 "loss 0.1 down to 0.02 (blank when a curve misses 0.02).")
    lines.append("")
    sh = ["matrix", "mode", "policy", "t(0.02)", "RR / x", "RANDOM / x", "SPEARMINT* / x", "x / ORACLE",
          "x / oracle_greedy", "interval RR / x", "interval RANDOM / x", "interval SPEARMINT* / x", "switched"]
    lines += md_header(sh)
    for m, v in results["matrices"].items():
        for mode, d in v["runs"].items():
            for ref, sb in v["analysis"][mode].get("side_by_side", {}).items():
                h = d["policies"][ref]
                ht = h["time_to_loss_mean_curve"][LEVEL]
                cells = [m, mode, ref, f"{ht:.4g}" if ht is not None else f"> {h['mean_budget']:.4g}"]
                for key in (f"round_robin/{ref}", f"random/{ref}", f"spearmint/{ref}", f"{ref}/oracle",
                            f"{ref}/oracle_greedy"):
                    cells.append(fmt_ratio(sb[key]) if sb.get(key) else "")
                iv = sb.get("interval_0.1_to_0.02", {})
                for b in TARGET_BASELINES:
                    cells.append(fmt_ratio(iv[b]) if iv.get(b) else "")
                sw = h.get("hybrid_switched")
                cells.append("" if sw is None else f"{sw:.2f}")
                lines.append(md_row(cells))
    lines.append("")
    lines.append("### The same with DESIGN.md's time_to_loss(0.02), and HYBRID's switch rate")
    lines.append("")
    lines.append("DESIGN.md: t is the mean over repetitions of the time at which the average loss first reaches "
                 "the level (`null` in the JSON unless every repetition reaches it). Here, when some repetitions "
                 "miss it, the censored mean (misses count as the budget) is used and the ratio is marked as a bound. "
                 "'H reached' is the share of repetitions in which HYBRID reached 0.02; 'H switched' the share in "
                 "which HYBRID's freeze test (§5.4) fired within the budget.")
    lines.append("")
    dh = ["matrix", "mode", "HYBRID t(0.02)", "H reached", "round_robin / H", "random / H", "spearmint / H",
          "H / oracle", "H switched"]
    lines += md_header(dh)
    for m, v in results["matrices"].items():
        for mode, d in v["runs"].items():
            a = v["analysis"][mode]
            h = d["policies"].get("hybrid")
            if h is None or "design" not in a:
                continue
            ht = h["time_to_loss"][LEVEL]
            cells = [m, mode, f"{ht:.4g}" if ht is not None else f">= {h['time_to_loss_censored'][LEVEL]:.4g}",
                     f"{h['reached'][LEVEL]:.2f}"]
            for key in ("round_robin/H", "random/H", "spearmint/H", "H/oracle"):
                r = a["design"].get(key)
                cells.append(fmt_ratio(r) if r else "")
            sw = a.get("hybrid_switched")
            cells.append("" if sw is None else f"{sw:.2f}")
            lines.append(md_row(cells))
    lines.append("")
    lines.append("### Area under the mean loss curve (time-averaged loss over the budget; lower is better)")
    lines.append("")
    pols = MAIN_POLICIES
    lines += md_header(["matrix", "mode", *pols])
    for m, v in results["matrices"].items():
        for mode, d in v["runs"].items():
            lines.append(md_row([m, mode, *(f"{d['policies'][p]['auc']:.4f}" if p in d["policies"] else ""
                                            for p in pols)]))
    lines.append("")
    lines.append("### GP-UCB over all arms (the paper's, default) vs over untried arms only (previous)")
    lines.append("")
    lines.append("Same splits and seeds. `all`: pvldb Algorithm 1 line 4 / Algorithm 2 line 10 take the argmax over "
                 "every arm, so a trained model can win again and is re-trained (it costs its cost again and "
                 "returns the same quality), and GREEDY's gap (line 8) is over all arms. `untried`: a model is "
                 "never trained twice. SPEARMINT*, ORACLE and the fixed orders are the same runs in both columns. "
                 "Ratios of t(0.02) read off the mean loss curves.")
    lines.append("")
    ah = ["matrix", "mode", "arms", "HYBRID t(0.02)", "greedy / H", "round_robin / H", "random / H", "spearmint / H",
          "H / oracle", "H / oracle_greedy", "H switched", "H auc", "RR auc"]
    lines += md_header(ah)
    for m, v in results["matrices"].items():
        for mode, d in v["runs"].items():
            if "policies_arms_untried" not in d or "hybrid" not in d["policies"]:
                continue
            for arms, P, a in (("all", d["policies"], v["analysis"][mode]),
                               ("untried", {**d["policies"], **d["policies_arms_untried"]},
                                v["analysis_arms_untried"][mode])):
                h = P["hybrid"]
                ht = h["time_to_loss_mean_curve"][LEVEL]
                cells = [m, mode, arms, f"{ht:.4g}" if ht is not None else f"> {h['mean_budget']:.4g}"]
                for b in ("greedy", "round_robin", "random", "spearmint"):
                    r = a["baseline_over_hybrid"].get(b)
                    cells.append(fmt_ratio(r) if r else "")
                for o in ("oracle", "oracle_greedy"):
                    r = a.get(f"hybrid_over_{o}")
                    cells.append(fmt_ratio(r) if r else "")
                sw = h.get("hybrid_switched")
                cells.append("" if sw is None else f"{sw:.2f}")
                cells.append(f"{h['auc']:.4f}")
                cells.append(f"{P['round_robin']['auc']:.4f}" if "round_robin" in P else "")
                lines.append(md_row(cells))
    if results.get("extensions"):
        lines.append("")
        lines.append("### Extensions (beyond the paper) against the plain version")
        lines.append("")
        lines.append("Times where the mean loss curve first reaches the level (`> B`: not within the mean budget B); "
                     "'reached' is the share of repetitions that got to 0.02; the parallel runs measure wall-clock time with W workers (the budget is the compute budget / W); `@plain` is the plain version: no GP-BUCB hallucination (parallel), weights hidden from the policy (weights), no re-arming of HYBRID (arrivals).")
        lines.append("")
        lines.append("| experiment | matrix | policy | t(0.05) | t(0.02) | reached 0.02 | auc |")
        lines.append("|---|---|---|---|---|---|---|")
        for ex, per in results["extensions"].items():
            for m, d in per.items():
                for p, v in d["policies"].items():
                    t5, t2 = v["time_to_loss_mean_curve"]["0.05"], v["time_to_loss_mean_curve"][LEVEL]
                    f = lambda t, key: f"{t:.4g}" if t is not None else f"> {v['mean_budget']:.4g}"  # noqa: E731
                    lines.append(f"| {ex} | {m} | {p} | {f(t5, '0.05')} | {f(t2, LEVEL)} | "
                                 f"{v['reached'][LEVEL]:.2f} | {v['auc']:.4f} |")
    lat = results.get("decision_latency_ms", {})
    if lat:
        lines.append("")
        lines.append("### Decision latency per pick (ms)")
        lines.append("")
        lines.append("| users x models | p50 | p99 | refit p50 | refit p99 | refit+hyperparameters p50 | refit / incremental (p50) |")
        lines.append("|---|---|---|---|---|---|---|")
        for k, v in lat.items():
            lines.append(f"| {k} | {v['p50']:.3f} | {v['p99']:.3f} | {v['refit_p50']:.3f} | {v['refit_p99']:.3f} | "
                         f"{v['refit_hyperparameters_p50']:.2f} | {v['refit_over_incremental_p50']:.1f}x |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions and a subset: < 1 minute")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 50; quick 3)")
    ap.add_argument("--ext-reps", type=int, default=None, help="repetitions of the extension runs (default 20)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    quick = args.quick
    reps = args.reps or (3 if quick else 50)
    ext_reps = args.ext_reps or (2 if quick else 20)
    t_all = time.time()
    log = lambda msg: print(f"[{time.time() - t_all:6.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    args.out.mkdir(parents=True, exist_ok=True)

    matrices: dict[str, dict] = {}
    d = delgado_matrices(args.seed)
    if quick:
        d = {k: v for k, v in d.items() if k == "delgado-uniform"}
    matrices.update(d)
    if quick and not (DATA / "sklearn_quality.csv").exists():
        log("sklearn-measured matrix not cached yet: skipped in --quick (run the full benchmark once to build it)")
    else:
        log("sklearn-measured matrix (build or cache)")
        matrices["sklearn-measured"] = build_sklearn_matrix(log)
    matrices.update(syn_matrices(quick))

    pool = mp.get_context("spawn").Pool(args.jobs) if args.jobs > 1 else None
    map_fn = (lambda f, it: pool.imap(f, it)) if pool else map
    results: dict = {"meta": {"quick": quick, "reps": reps, "ext_reps": ext_reps, "seed": args.seed,
                              "jobs": args.jobs, "cpus": os.cpu_count(), "python": platform.python_version(),
                              "numpy": np.__version__},
                     "matrices": {}, "extensions": {}}
    policies = QUICK_POLICIES if quick else MAIN_POLICIES
    modes = [("cost_aware", True)] if quick else [("cost_aware", True), ("cost_oblivious", False)]
    try:
        for name, m in matrices.items():
            entry = {k: v for k, v in m.items() if k in ("quality_source", "cost_source", "model_source",
                                                          "sklearn_version", "build_seconds")}
            entry.update(n_users=int(m["quality"].shape[0]), n_models=int(m["quality"].shape[1]), runs={}, analysis={})
            for mode, ca in modes:
                if name == "delgado-tier" and not ca:
                    continue  # same qualities as delgado-uniform: cost-oblivious runs would be identical
                t0 = time.time()
                untried = [p for p in UCB_POLICIES if p in policies]
                doc = simulate(m["quality"], m["cost"], policies=policies + [f"{p}@untried" for p in untried],
                               reps=reps, budget=0.1, n_test=10, seed=args.seed, cost_aware=ca, map_fn=map_fn,
                               levels=LEVELS, variants={f"{p}@untried": {"arms": "untried"} for p in untried})
                # ``policies`` keeps DESIGN.md's meaning (the default policy set); the untried variants,
                # paired with them (same splits and seeds), go to ``policies_arms_untried``
                doc["policies_arms_untried"] = {p: doc["policies"].pop(f"{p}@untried") for p in untried}
                entry["runs"][mode] = doc
                entry["analysis"][mode] = analyse(doc)
                entry.setdefault("analysis_arms_untried", {})[mode] = analyse(
                    {"policies": {**doc["policies"], **doc["policies_arms_untried"]}})
                a = entry["analysis"][mode]
                log(f"{name:18s} {mode:14s} {time.time() - t0:6.1f}s  " + "  ".join(
                    f"{b}/H={fmt_ratio(r)}" for b, r in a["baseline_over_hybrid"].items()) +
                    (f"  H/oracle={fmt_ratio(a['hybrid_over_oracle'])}" if a.get("hybrid_over_oracle") else ""))
                au = entry["analysis_arms_untried"][mode]
                log(f"{'':18s} {'arms=untried':14s} " + "  ".join(
                    f"{b}/H={fmt_ratio(r)}" for b, r in au["baseline_over_hybrid"].items()) +
                    (f"  H/oracle={fmt_ratio(au['hybrid_over_oracle'])}" if au.get("hybrid_over_oracle") else ""))
            results["matrices"][name] = entry

        # -- extensions, each against its plain version --------------------------------
        ext_on = [n for n in ("sklearn-measured", "delgado-uniform") if n in matrices]
        if quick:
            ext_on = ext_on[:1]
        par = dict(policies=["hybrid", "hybrid@plain", "round_robin", "round_robin@plain"],
                   variants={"hybrid@plain": {"hallucinate": False}, "round_robin@plain": {"hallucinate": False}})
        experiments = {
            "parallel_W8": dict(n_workers=8, **par),
            "parallel_W16": dict(n_workers=16, **par),
            "user_weights_1_or_4": dict(policies=["hybrid", "hybrid@plain", "round_robin", "round_robin@plain"],
                                        weight_choices=(1.0, 4.0),
                                        variants={"hybrid@plain": {"use_weights": False},
                                                  "round_robin@plain": {"use_weights": False}}),
            "arrivals_leave": dict(policies=["hybrid", "hybrid@plain", "round_robin"], arrival_spread=0.5, stay=0.7,
                                   variants={"hybrid@plain": {"rearm_on_change": False}}),
            "lesion_cost_and_beta": dict(policies=["hybrid", "hybrid@no_cost", "hybrid@theorem", "round_robin@theorem",
                                                   "hybrid@beta0.2", "round_robin@beta0.2", "spearmint",
                                                   "hybrid@user_cost_norm", "round_robin@user_cost_norm", "hybrid_ei",
                                                   "regret_ei"],
                                         variants={"hybrid@no_cost": {"policy_cost_aware": False},
                                                   "hybrid@user_cost_norm": {"cost_norm": "user"},
                                                   "round_robin@user_cost_norm": {"cost_norm": "user"},
                                                   "hybrid@theorem": {"beta_schedule": "theorem"},
                                                   "round_robin@theorem": {"beta_schedule": "theorem"},
                                                   "hybrid@beta0.2": {"beta_scale": 0.2},
                                                   "round_robin@beta0.2": {"beta_scale": 0.2}}),
            # pvldb §6.3.1 / arXiv Fig. 15: the hybrid lesion is cost-oblivious on 179CLASSIFIER, and the
            # cost-oblivious protocol trains "50% of all available models" (not 10 %)
            "hybrid_lesion_oblivious_50pct": dict(policies=["hybrid", "greedy", "round_robin", "random", "spearmint"],
                                                  budget=0.5, cost_aware=False, only=["delgado-uniform"]),
        }
        if quick:
            experiments = {k: experiments[k] for k in ("parallel_W16",)}
        for ex, kw in experiments.items():
            results["extensions"][ex] = {}
            kw = dict(kw)
            ex_budget, ex_ca, only = kw.pop("budget", 0.1), kw.pop("cost_aware", True), kw.pop("only", None)
            on = ext_on + (["SYN(0.5,1)"] if ex.startswith("parallel") and "SYN(0.5,1)" in matrices and not quick else [])
            if only is not None:
                on = [n for n in only if n in matrices]
            for name in on:
                m = matrices[name]
                t0 = time.time()
                doc = simulate(m["quality"], m["cost"], reps=ext_reps, budget=ex_budget, n_test=10, seed=args.seed,
                               cost_aware=ex_ca, map_fn=map_fn, **kw)
                results["extensions"][ex][name] = doc
                log(f"extension {ex:22s} {name:16s} {time.time() - t0:6.1f}s  " + "  ".join(
                    f"{p}: t02={v['time_to_loss_mean_curve'][LEVEL]} auc={v['auc']:.4f}"
                    for p, v in doc["policies"].items()))
    finally:
        if pool is not None:
            pool.close()
            pool.join()

    if not args.skip_latency:
        lat = {}
        for n_users, picks in ((100, 300 if quick else 1000), (1000, 200 if quick else 500)):
            t0 = time.time()
            lat[f"{n_users}x200"] = measure_latency(n_users, picks=picks, refit_picks=40 if quick else 150)
            v = lat[f"{n_users}x200"]
            log(f"latency {n_users}x200: p50 {v['p50']:.3f} ms p99 {v['p99']:.3f} ms; refit p50 {v['refit_p50']:.3f} "
                f"ms ({v['refit_over_incremental_p50']:.1f}x) [{time.time() - t0:.1f}s]")
        results["decision_latency_ms"] = lat
        results["latency_targets"] = {"100x200_under_5ms": lat["100x200"]["p99"] < 5.0,
                                      "1000x200_under_50ms": lat["1000x200"]["p99"] < 50.0}
    results["meta"]["elapsed_seconds"] = round(time.time() - t_all, 1)
    name = "selection_quick" if quick else "selection"  # a quick run never replaces the full run's figures
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    (args.out / f"{name}.md").write_text(markdown(results))
    plot(results, args.out / f"{name}.png", args.out / f"{name}.html")
    log(f"wrote {args.out / f'{name}.json'} (+ .md, .png, .html)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
