"""Gaussian-process beliefs over candidate models: one shared prior, one posterior per user.

* :class:`ModelPrior` is the GP prior over the catalogue of K models. Following
  ease.ml (arXiv:1708.07308, Appendix A), a model's feature vector is its
  quality on the users of the "training set": the qualities other users
  observed define how similar two models are. Its hyperparameters are fitted
  by maximising the log-marginal likelihood with scikit-learn's
  :class:`~sklearn.gaussian_process.GaussianProcessRegressor` ("all
  hyperparameters for GP-UCB are tuned by maximizing the log-marginal-likelihood
  as in scikit-learn", pvldb §6.2): scikit-learn kernels, scikit-learn's
  objective and optimiser set-up (L-BFGS-B within the kernel bounds, random
  restarts), evaluated with a trace trick that is cheaper for many
  targets (:func:`log_marginal_likelihood`). With no history it falls back to a kernel
  over model descriptors (e.g. ``Candidate.descriptor`` from the zoo).
* :class:`UserGP` is one user's posterior over her candidate models. Each new
  observation is a rank-one update of the Cholesky factor (O(n K) work for n
  observations and K models) instead of a refit from scratch (O(n^3 + n^2 K)).

The kernel is ``C_off + C_amp * RBF(l) + White(nugget)`` on the quality
vectors (scaled by ``1/sqrt(d)`` so the length scale does not depend on how
many training users there are):

* ``C_off`` is a random per-user offset shared by all models: tasks differ in
  difficulty (App. B's baseline quality ``b_i``), and one observation moves the
  whole belief of that user up or down;
* ``C_amp * RBF`` is the model correlation learnt from other users (App. B's
  ``m_j``);
* ``White`` is the model-specific rest (App. B's ``eps_ij``). It is part of the
  *latent* function over the finite set of models, not observation noise:
  observing model k tells us (almost) exactly its quality, but nothing about
  the idiosyncratic part of the others. Observation noise is the small,
  separate ``alpha`` (as in scikit-learn).
"""

from __future__ import annotations

import math
import warnings
from typing import Sequence

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular
from scipy.optimize import minimize
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, WhiteKernel

__all__ = ["ModelPrior", "UserGP", "impute_history", "default_kernel", "log_marginal_likelihood", "fit_kernel"]


def _one_blas_thread():
    """K x K factorisations for K <= ~1000 are fastest on one BLAS thread; a
    multi-threaded OpenBLAS on a busy machine can be 10x slower."""
    try:
        from threadpoolctl import threadpool_limits  # a scikit-learn dependency
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def impute_history(history: np.ndarray) -> np.ndarray:
    """Fill missing (NaN) cells of a users x models quality matrix.

    Additive fill ``row mean + column mean - grand mean`` (a two-way ANOVA fit),
    clipped to [0, 1]. Delgado et al.'s table has 449 such cells of 21,659.
    """
    q = np.array(history, dtype=float, copy=True)
    if q.ndim != 2:
        raise ValueError(f"history: found {q.ndim} dimensions, expected a 2-D users x models matrix")
    mask = np.isnan(q)
    if not mask.any():
        return q
    if mask.all():
        raise ValueError("history: every value is missing")
    grand = np.nanmean(q)
    with np.errstate(invalid="ignore"):
        row = np.nanmean(np.where(mask.all(axis=1, keepdims=True), grand, q), axis=1)
        col = np.nanmean(np.where(mask.all(axis=0, keepdims=True), grand, q), axis=0)
    fill = np.clip(row[:, None] + col[None, :] - grand, 0.0, 1.0)
    q[mask] = fill[mask]
    return q


def _median_distance(x: np.ndarray) -> float:
    if x.shape[0] < 2:
        return 1.0
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    iu = np.triu_indices(x.shape[0], 1)
    d = np.sqrt(d2[iu])
    d = d[d > 1e-12]
    return float(np.median(d)) if d.size else 1.0


def default_kernel(offset: float, amplitude: float, length_scale: float, nugget: float) -> Kernel:
    """``C_off + C_amp * RBF(length_scale) + White(nugget)`` with wide bounds."""
    clip = lambda v: float(min(max(v, 2e-8), 5.0))  # keep inside the bounds below
    return (
        ConstantKernel(clip(offset), (1e-8, 10.0))
        + ConstantKernel(clip(amplitude), (1e-8, 10.0)) * RBF(float(min(max(length_scale, 2e-3), 500.0)), (1e-3, 1e3))
        + WhiteKernel(clip(nugget), (1e-8, 10.0))
    )


def log_marginal_likelihood(kernel: Kernel, X: np.ndarray, Y: np.ndarray, alpha: float,
                            theta: np.ndarray | None = None, eval_gradient: bool = False,
                            S: np.ndarray | None = None):
    """Log-marginal likelihood of a zero-mean GP, summed over the columns of Y.

    The same objective as scikit-learn's
    ``GaussianProcessRegressor.log_marginal_likelihood`` (Rasmussen & Williams
    Alg. 2.1 and Eq. 5.9, summed over targets), computed with the trace trick
    ``sum_j y_j^T K^-1 y_j = tr(K^-1 Y Y^T)``: O(K^3 + K^2 P) per evaluation for
    K models and P hyperparameters, where scikit-learn's multi-target gradient
    builds a K x K x T tensor. It matters here because the prior is fitted
    once per simulated split on every training user.

    Args:
        kernel: the kernel; ``theta`` (log-hyperparameters) overrides its own.
        X: K x d inputs. Y: K x T targets.
        alpha: noise variance added to the diagonal.
        eval_gradient: also return the gradient w.r.t. theta.
        S: ``Y @ Y.T`` if already computed.
    """
    kern = kernel if theta is None else kernel.clone_with_theta(theta)
    n, T = Y.shape
    if S is None:
        S = Y @ Y.T
    if eval_gradient:
        Kx, dK = kern(X, eval_gradient=True)
    else:
        Kx = kern(X)
    Kx = np.array(Kx, dtype=float, copy=True)
    Kx[np.diag_indices_from(Kx)] += alpha
    try:
        L = cholesky(Kx, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return (-np.inf, np.zeros(len(kern.theta))) if eval_gradient else -np.inf
    Linv = solve_triangular(L, np.eye(n), lower=True, check_finite=False)
    Kinv = Linv.T @ Linv
    KinvS = Kinv @ S
    lml = -0.5 * np.trace(KinvS) - T * np.log(np.diag(L)).sum() - 0.5 * T * n * math.log(2.0 * math.pi)
    if not eval_gradient:
        return float(lml)
    inner = KinvS @ Kinv - T * Kinv  # sum_j alpha_j alpha_j^T - T K^-1
    grad = 0.5 * np.einsum("ij,jik->k", inner, dK)
    return float(lml), grad


def fit_kernel(kernel: Kernel, X: np.ndarray, Y: np.ndarray, *, alpha: float, n_restarts: int = 1,
               rng: np.random.Generator | None = None) -> tuple[Kernel, float]:
    """Maximise :func:`log_marginal_likelihood` over the kernel's bounds.

    As scikit-learn does: L-BFGS-B from the kernel's initial theta, then
    ``n_restarts`` more starts drawn log-uniformly within the bounds; the best
    optimum wins. Returns (fitted kernel, its log-marginal likelihood).
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    S = Y @ Y.T
    bounds = kernel.bounds

    def obj(theta):
        v, g = log_marginal_likelihood(kernel, X, Y, alpha, theta, eval_gradient=True, S=S)
        if not np.isfinite(v):
            return 1e25, np.zeros_like(theta)
        return -v, -g

    starts = [kernel.theta] + [rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(int(n_restarts))]
    best_theta, best_val = kernel.theta, np.inf
    for th0 in starts:
        res = minimize(obj, th0, jac=True, method="L-BFGS-B", bounds=bounds)
        if res.fun < best_val:
            best_theta, best_val = res.x, float(res.fun)
    return kernel.clone_with_theta(best_theta), -best_val


class ModelPrior:
    """GP prior over a catalogue of K models (arXiv App. A).

    Parameters
    ----------
    kernel : sklearn Kernel, optional
        Kernel to fit. Default: :func:`default_kernel` initialised from the data.
    holdout_fraction : float, default=1/3
        Share of the history users whose quality vectors are the *targets* of
        the likelihood fit, while the rest give the model *features*. Fitting on
        the same users that define the features would let each target be read
        off its own coordinate, which biases the length scale. The final
        features then use all history users.
    n_restarts_optimizer : int, default=1
        Extra random starts of the optimiser (as scikit-learn's).
    alpha : float, default=1e-4
        Observation-noise variance added to observed models (sklearn's
        ``alpha``); 1e-4 is a standard deviation of 1 accuracy point, the
        seed-to-seed spread of a typical training run.
    prior_mean : float, default=0.5
        Mean quality assumed when there is no history at all.
    random_state : int or numpy Generator, optional

    Attributes
    ----------
    mean_ : ndarray (K,)
        Prior mean of each model (its mean quality over the history users).
    cov_ : ndarray (K, K)
        Prior covariance of the latent qualities (kernel on ``features_``).
    kernel_ : Kernel
        The fitted kernel.
    features_ : ndarray (K, d)
    source_ : {"history", "descriptors", "independent", "given"}
    log_marginal_likelihood_value_ : float or None

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> history = np.clip(0.7 + 0.1 * rng.standard_normal((20, 6)), 0, 1)
    >>> prior = ModelPrior(random_state=0).fit(history)
    >>> prior.cov_.shape
    (6, 6)
    """

    def __init__(self, *, kernel: Kernel | None = None, holdout_fraction: float = 1.0 / 3.0,
                 n_restarts_optimizer: int = 1, alpha: float = 1e-4, prior_mean: float = 0.5,
                 random_state: int | np.random.Generator | None = None):
        self.kernel = kernel
        self.holdout_fraction = holdout_fraction
        self.n_restarts_optimizer = n_restarts_optimizer
        self.alpha = alpha
        self.prior_mean = prior_mean
        self.random_state = random_state

    # -- construction -------------------------------------------------------------
    @classmethod
    def from_arrays(cls, mean: Sequence[float], cov: np.ndarray, *, alpha: float = 1e-4) -> "ModelPrior":
        """A prior with a given mean and covariance (no fitting); for tests and
        hand-computed examples."""
        self = cls(alpha=alpha)
        self.mean_ = np.asarray(mean, dtype=float).copy()
        self.cov_ = np.asarray(cov, dtype=float).copy()
        k = self.mean_.shape[0]
        if self.cov_.shape != (k, k):
            raise ValueError(f"cov: found shape {self.cov_.shape}, expected ({k}, {k})")
        self.kernel_ = None
        self.features_ = np.eye(k)
        self.source_ = "given"
        self.log_marginal_likelihood_value_ = None
        return self

    def _rng(self) -> np.random.Generator:
        rs = self.random_state
        return rs if isinstance(rs, np.random.Generator) else np.random.default_rng(rs)

    def fit(self, history: np.ndarray | None = None, *, descriptors: np.ndarray | None = None,
            n_models: int | None = None) -> "ModelPrior":
        """Fit the prior.

        Args:
            history: users x models quality matrix of the "training set" users
                (NaN for missing cells), or None.
            descriptors: models x d descriptor matrix, used when ``history`` is
                None or has no rows.
            n_models: K, needed only when neither history nor descriptors exist
                (independent models).

        Returns:
            self
        """
        if history is not None and np.asarray(history).size and np.asarray(history).shape[0] > 0:
            with _one_blas_thread():
                return self._fit_history(np.asarray(history, dtype=float))
        return self._fit_descriptors(descriptors, n_models)

    def _fit_history(self, history: np.ndarray) -> "ModelPrior":
        q = impute_history(history)
        n_h, k = q.shape
        rng = self._rng()
        gp_seed = int(rng.integers(2**31 - 1))
        if n_h >= 4:
            n_hold = min(n_h - 2, max(1, int(round(n_h * self.holdout_fraction))))
            perm = rng.permutation(n_h)
            hold, feat = perm[:n_hold], perm[n_hold:]
        else:  # too few users to hold any out: fit in-sample
            hold = feat = np.arange(n_h)
        xf = q[feat].T / math.sqrt(len(feat))
        y = q[hold].T - q[feat].mean(axis=0)[:, None]  # K x |hold|
        lml = None
        if self.kernel is not None:
            kernel = self.kernel
        else:
            spread = float(np.var(y)) if n_h > 1 else 0.01
            spread = max(spread, 1e-4)
            offset = float(np.var(y.mean(axis=0))) if y.shape[1] > 1 else 0.5 * spread
            kernel = default_kernel(max(offset, 1e-4), spread, _median_distance(xf), 0.1 * spread)
        if n_h >= 3:
            kernel_, lml = fit_kernel(kernel, xf, y, alpha=self.alpha, n_restarts=self.n_restarts_optimizer,
                                      rng=np.random.default_rng(gp_seed))
        else:  # one or two users: keep the data-initialised hyperparameters
            kernel_ = kernel
        self.kernel_ = kernel_
        self.features_ = q.T / math.sqrt(n_h)
        self.mean_ = q.mean(axis=0)
        self.cov_ = np.asarray(kernel_(self.features_), dtype=float)
        self.source_ = "history"
        self.log_marginal_likelihood_value_ = lml
        self.n_history_ = n_h
        return self

    def _fit_descriptors(self, descriptors: np.ndarray | None, n_models: int | None) -> "ModelPrior":
        if descriptors is not None:
            d = np.asarray(descriptors, dtype=float)
            if d.ndim != 2:
                raise ValueError(f"descriptors: found {d.ndim} dimensions, expected models x features")
            sd = d.std(axis=0)
            keep = sd > 1e-12
            x = (d[:, keep] - d[:, keep].mean(axis=0)) / sd[keep] if keep.any() else np.eye(d.shape[0])
            source = "descriptors" if keep.any() else "independent"
        else:
            if n_models is None:
                raise ValueError("n_models: needed when there is neither history nor descriptors")
            x = np.eye(int(n_models))
            source = "independent"
        k = x.shape[0]
        # Without history nothing can be fitted yet: a broad prior. The offset
        # (std 0.2) says "we do not know how hard this task is"; the model part
        # (std 0.1) how much models differ on it. UserGP.refit() refines these
        # from the user's own observations.
        ell = _median_distance(x) if source == "descriptors" else 0.5
        self.kernel_ = self.kernel if self.kernel is not None else default_kernel(0.04, 0.01, ell, 0.0025)
        self.features_ = x
        self.mean_ = np.full(k, float(self.prior_mean))
        self.cov_ = np.asarray(self.kernel_(x), dtype=float)
        self.source_ = source
        self.log_marginal_likelihood_value_ = None
        self.n_history_ = 0
        return self

    @property
    def n_models(self) -> int:
        return int(self.mean_.shape[0])

    #: Monte Carlo draws of :meth:`near_best_probability` (fixed seed: the same picks every run).
    N_DRAWS = 4096

    def near_best_probability(self, models: Sequence[int] | None, delta: float) -> np.ndarray:
        """``p_k = P(f_k >= max_j f_j - delta)`` for ``f ~ N(mean, cov)`` restricted to ``models``
        (catalogue indices; None: all): the prior probability that model k is within ``delta`` of
        the best of a new user's candidates. A Monte Carlo estimate with fixed draws, cached per
        (models, delta): every new user with the same candidates shares it. An entry holds the
        ``mean_`` and ``cov_`` it was drawn from and is used only while they are still this
        prior's (a refit assigns new arrays). The shared offset of the kernel cancels in the
        comparison, so ``p`` ranks models by how often they are near the top, not by how
        uncertain the task's level is.
        """
        idx = np.arange(self.n_models) if models is None else np.asarray(models, dtype=np.intp)
        key = (idx.tobytes(), float(delta))
        cache = self.__dict__.setdefault("_near_best_cache", {})
        hit = cache.get(key)
        if hit is None or hit[0] is not self.mean_ or hit[1] is not self.cov_:
            cov = self.cov_[np.ix_(idx, idx)]
            w, v = np.linalg.eigh(0.5 * (cov + cov.T))
            root = v * np.sqrt(np.clip(w, 0.0, None))
            z = np.random.default_rng(0).standard_normal((self.N_DRAWS, idx.size))
            f = self.mean_[idx] + z @ root.T
            hit = cache[key] = (self.mean_, self.cov_, np.mean(f >= f.max(axis=1, keepdims=True) - delta, axis=0))
        return hit[2].copy()

    def with_own_models(self, n: int) -> "ModelPrior":
        """This prior over the catalogue plus ``n`` models of one user's own,
        appended (indices ``K .. K+n-1``). Nothing is known of an own model
        beyond the task: its mean is the catalogue's mean, and its feature a
        point far from every other model, so the kernel's constant part (how
        hard the task is) is all it shares with them; without a kernel, it is
        independent with the catalogue's mean variance."""
        if n <= 0:
            return self
        k = self.n_models
        ext = ModelPrior(kernel=self.kernel, alpha=self.alpha, prior_mean=self.prior_mean)
        ext.mean_ = np.append(self.mean_, np.full(n, float(np.mean(self.mean_)) if k else self.prior_mean))
        features = self.features_ if getattr(self, "features_", None) is not None else np.eye(k)
        far = np.abs(features).max(initial=1.0) * 1e6
        own = np.zeros((n, features.shape[1]))
        own[:, 0] = far * (np.arange(n) + 2.0)  # far from the catalogue and from each other
        ext.features_ = np.vstack([features, own])
        if self.kernel_ is not None:
            ext.cov_ = np.asarray(self.kernel_(ext.features_), dtype=float)
        else:
            var = float(np.mean(np.diag(self.cov_))) if k else 0.05
            ext.cov_ = np.zeros((k + n, k + n))
            ext.cov_[:k, :k] = self.cov_
            ext.cov_[k:, k:] = np.eye(n) * var
        ext.kernel_ = self.kernel_
        ext.source_ = self.source_
        ext.log_marginal_likelihood_value_ = self.log_marginal_likelihood_value_
        ext.n_history_ = getattr(self, "n_history_", 0)
        return ext


class UserGP:
    """One user's GP posterior over her candidate models, updated incrementally.

    Parameters
    ----------
    prior : ModelPrior
        The fitted prior over the catalogue.
    models : sequence of int, optional
        Catalogue indices of this user's candidates (default: all). The
        posterior is indexed by *local* positions ``0..len(models)-1``.
    alpha : float, optional
        Observation-noise variance; default ``prior.alpha``.

    Attributes
    ----------
    mean_, var_ : ndarray (K_u,)
        Posterior mean and variance (lines 6-7 of Algorithm 1).
    L_ : ndarray (n, n)
        Lower Cholesky factor of ``K_SS + alpha I`` over the n observations.
    X_obs_, y_obs_ : observed local indices and qualities, in order.

    Notes
    -----
    Keeping ``V = L^{-1} K_{S,*}`` and ``z = L^{-1} (y - m_S)`` makes an
    observation at model k a rank-one step (Rasmussen & Williams Alg. 2.1,
    with the Cholesky factor grown one row at a time):

    * the new row of L is ``l = V[:, k]`` and ``d = sqrt(var_k + alpha)``;
    * the new row of V is ``v = (K_{k,*} - l^T V) / d``, the posterior
      covariance of k with every model divided by d;
    * the new entry of z is ``(y - mean_k) / d``;
    * so ``mean += v z_new`` and ``var -= v**2``.

    That is O(n K) per observation, against O(n^3 + n^2 K) for a refit.
    """

    def __init__(self, prior: ModelPrior, models: Sequence[int] | None = None, *, alpha: float | None = None):
        self.prior = prior
        k_all = prior.n_models
        if models is None:
            self.models = np.arange(k_all)
            self._full = True
        else:
            self.models = np.asarray(models, dtype=np.intp)
            if self.models.ndim != 1 or self.models.size == 0:
                raise ValueError("models: expected a non-empty 1-D list of catalogue indices")
            if self.models.min() < 0 or self.models.max() >= k_all:
                raise ValueError(f"models: indices must lie in [0, {k_all})")
            self._full = bool(self.models.size == k_all and np.array_equal(self.models, np.arange(k_all)))
        self.alpha = float(prior.alpha if alpha is None else alpha)
        self._cov = None  # a per-user covariance after refit(); else the prior's
        self._reset()

    # -- internals ----------------------------------------------------------------
    def _prior_cov_row(self, k: int) -> np.ndarray:
        if self._cov is not None:
            return self._cov[k]
        g = self.models[k]
        row = self.prior.cov_[g]
        return row if self._full else row[self.models]

    def _prior_mean(self) -> np.ndarray:
        return self.prior.mean_.copy() if self._full else self.prior.mean_[self.models].copy()

    def _prior_var(self) -> np.ndarray:
        if self._cov is not None:
            return np.diag(self._cov).copy()
        d = np.diag(self.prior.cov_)
        return d.copy() if self._full else d[self.models].copy()

    def _reset(self) -> None:
        k = self.models.size
        self.m0_ = self._prior_mean()
        self.mean_ = self.m0_.copy()
        self.var_ = self._prior_var()
        cap = 8
        self._V = np.zeros((cap, k))
        self._L = np.zeros((cap, cap))
        self._z = np.zeros(cap)
        self.n_obs = 0
        self.X_obs_: list[int] = []
        self.y_obs_: list[float] = []

    def _grow(self) -> None:
        cap = self._V.shape[0] * 2
        V = np.zeros((cap, self._V.shape[1])); V[: self.n_obs] = self._V[: self.n_obs]
        L = np.zeros((cap, cap)); L[: self.n_obs, : self.n_obs] = self._L[: self.n_obs, : self.n_obs]
        z = np.zeros(cap); z[: self.n_obs] = self._z[: self.n_obs]
        self._V, self._L, self._z = V, L, z

    # -- public API -----------------------------------------------------------------
    @property
    def n_models(self) -> int:
        return int(self.models.size)

    @property
    def std_(self) -> np.ndarray:
        return np.sqrt(np.maximum(self.var_, 0.0))

    @property
    def innovations_(self) -> np.ndarray:
        """The standardised one-step-ahead residuals ``(y - mu_prev(k)) / sqrt(var_prev(k) + alpha)``
        of the observations, in order: the ``z`` of the rank-one updates. Standard normal when the
        prior is right; ``capped_ei.variance_scale`` calibrates the user's variance with them."""
        return self._z[: self.n_obs].copy()

    @property
    def L_(self) -> np.ndarray:
        return self._L[: self.n_obs, : self.n_obs].copy()

    def near_best_probability(self, delta: float) -> np.ndarray:
        """Before her first observation: the prior probability that each of her models is within
        ``delta`` of her best (:meth:`ModelPrior.near_best_probability`, cached per prior).

        Raises:
            ValueError: she has observations (her posterior is no longer the prior).
        """
        if self.n_obs or self._cov is not None:
            raise ValueError("near_best_probability: defined before the first observation only")
        return self.prior.near_best_probability(None if self._full else self.models, delta)

    def predict(self, return_std: bool = True):
        """Posterior mean (and standard deviation) of every candidate model."""
        return (self.mean_.copy(), self.std_) if return_std else self.mean_.copy()

    def observe(self, k: int, y: float) -> None:
        """Condition on quality ``y`` of local model ``k`` (a rank-one update)."""
        n = self.n_obs
        if n == self._V.shape[0]:
            self._grow()
        l = self._V[:n, k]
        d2 = self.var_[k] + self.alpha
        if not d2 > 0.0:
            raise np.linalg.LinAlgError(
                f"non-positive pivot {d2!r} while adding model {k}; try a larger 'alpha'")
        d = math.sqrt(d2)
        v = (self._prior_cov_row(k) - l @ self._V[:n]) / d
        znew = (float(y) - self.mean_[k]) / d
        self._L[n, :n] = l
        self._L[n, n] = d
        self._V[n] = v
        self._z[n] = znew
        self.mean_ += v * znew
        self.var_ -= v * v
        np.maximum(self.var_, 0.0, out=self.var_)
        self.n_obs = n + 1
        self.X_obs_.append(int(k))
        self.y_obs_.append(float(y))

    def posterior_cov(self) -> np.ndarray:
        """The full K_u x K_u posterior covariance ``K - V^T V`` (O(n K^2))."""
        k = self.models.size
        if self._cov is not None:
            prior = self._cov
        else:
            prior = self.prior.cov_ if self._full else self.prior.cov_[np.ix_(self.models, self.models)]
        V = self._V[: self.n_obs]
        return prior - V.T @ V if self.n_obs else np.array(prior, dtype=float, copy=True).reshape(k, k)

    def hallucinated_var(self, pending: Sequence[int]) -> np.ndarray:
        """Posterior variance as if the ``pending`` models had been observed.

        GP-BUCB (Desautels, Krause & Burdick 2014): a pick that is still running
        will return *some* value, so the variance it removes is known already
        while the mean is not. Hallucinating ``y = mean`` leaves the mean as it
        is and shrinks the variance, which steers concurrent picks elsewhere.
        """
        var = self.var_.copy()
        if len(pending) == 0:
            return var
        n = self.n_obs
        V = self._V[:n]
        hs: list[np.ndarray] = []
        for p in pending:
            cov_p = self._prior_cov_row(p) - V[:, p] @ V
            for h in hs:
                cov_p = cov_p - h[p] * h
            d2 = var[p] + self.alpha
            h = cov_p / math.sqrt(d2)
            var -= h * h
            hs.append(h)
        return np.maximum(var, 0.0)

    def posterior_from_scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance recomputed by a fresh Cholesky factorisation.

        The reference for the incremental update (tests, latency benchmark):
        ``mu = m + K_{*S} (K_SS + alpha I)^{-1} (y - m_S)`` and
        ``var = diag K - diag(K_{*S} (K_SS + alpha I)^{-1} K_{S*})``.
        """
        m0 = self._prior_mean()
        var0 = self._prior_var()
        if self.n_obs == 0:
            return m0, var0
        S = np.asarray(self.X_obs_)
        Kx = np.stack([self._prior_cov_row(s) for s in S])  # n x K
        Kss = Kx[:, S] + self.alpha * np.eye(len(S))
        L = cholesky(Kss, lower=True)
        V = solve_triangular(L, Kx, lower=True)
        a = cho_solve((L, True), np.asarray(self.y_obs_) - m0[S])
        return m0 + Kx.T @ a, np.maximum(var0 - np.einsum("ij,ij->j", V, V), 0.0)

    def refit(self, *, n_restarts_optimizer: int = 0, random_state: int | None = None) -> None:
        """Re-estimate the kernel hyperparameters from this user's own observations.

        For the no-history fallback only: the prior's hyperparameters are then
        guesses, and the user's observations are the only data. Uses
        scikit-learn's log-marginal-likelihood optimiser, then rebuilds the
        posterior (a refit from scratch; call it rarely, e.g. on a doubling
        schedule of the number of observations).
        """
        if self.n_obs < 3 or self.prior.kernel_ is None:
            return
        X = self.prior.features_[self.models]
        S = np.asarray(self.X_obs_)
        y = np.asarray(self.y_obs_) - self.m0_[S]
        gpr = GaussianProcessRegressor(kernel=self.prior.kernel_, alpha=self.alpha,
                                       n_restarts_optimizer=n_restarts_optimizer, random_state=random_state)
        with warnings.catch_warnings():  # a few points often put a bound active; that is expected
            warnings.simplefilter("ignore", ConvergenceWarning)
            gpr.fit(X[S], y)
        self._cov = np.asarray(gpr.kernel_(X), dtype=float)
        self.kernel_ = gpr.kernel_
        obs = list(zip(self.X_obs_, self.y_obs_))
        self._reset()
        for k, yy in obs:
            self.observe(k, yy)
