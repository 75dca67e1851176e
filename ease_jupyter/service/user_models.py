"""A user's own models: her scikit-learn estimator or her torch net factory
as arms of her task, beside the zoo's (Seneca §II takes the user's own
function and grid; Cerebro §4.1 the user's own ``model_fn``).

Transport and storage. The client pickles the object with cloudpickle
(notebook-defined classes and functions by value) and posts it with its grid
(``POST /api/v1/tasks/{name}/models``). The service never unpickles it: it
checks the name, the kind and the grid, stores the bytes as a blob and the
record as a reserved task tag ``easeml.user_model.<name>`` (JSON; read and
written only through :class:`UserModels`). Tags, not a table: a task has a
handful of them, they are read with their task only, and a record is never
changed once written, which is what tags already give in both stores, with
no migration; ``delete_task`` removes them with the task, and the blob GC
keeps their blobs (:func:`blob_references`).

Jobs. A user model's arm trains like a zoo model's: an estimator's grid as a
scikit-learn grid job (``jobspec.SklearnGrid``), a factory's configs as a
torch MOP workload (``jobspec.TorchWorkload``). The job's config carries
``code`` (the blob it trains, so a job always knows which version of the
user's code it ran) and ``limit`` (seconds). The code is unpickled only in
the worker that runs the job (:func:`user_candidate`).

Isolation. The calls into user code that may hang (loading it, an
estimator's clone + set_params + fit, its predict, the factory with a first
forward pass) run in a child process of the job (``user_sandbox``), killed at
the job's deadline (an estimator's: its job's start plus its limit; a net's
build: its limit from the build's start, since a net's job is charged the
running time of its units, not their wait for a worker): a model that hangs
there fails its job with a ``UserModelTimeout`` and nothing of it runs on;
the job's children end with it (``JobScope``, held by an estimator's
builder; a net's child ends once the net is built). An error is re-raised
with the user's own traceback (``UserModelError``), and an output of the
wrong shape is a ``DataError`` naming the model. A timeout, not a sandbox:
unpickling what the child returns (her estimator, her net), pickling her
estimator to send it, and ``forward`` during training (autograd cannot cross
processes) run her code in the worker (docs/models.md lists them). A training
unit still running when the job's limit is spent is given up on by the engine, which
replaces its worker (a fresh thread of a local engine; a restarted Dask
worker process), and the job fails with ``UserModelTimeout``.

Permission. User code runs on shared workers: the service takes it only
from users allowed to (:func:`check_allowed`): ``--allow-user-models``
(``ServiceConfig.allow_user_models``) sets the default, and an admin's
per-user setting (the user tag ``easeml.allow_user_models``) overrides it.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import pickle
import time
import traceback
from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Iterable, Mapping

from sklearn.base import BaseEstimator

from ..errors import AlreadyExistsError, DataError
from ..jobspec import DEFAULT_LRS, JobSpec, SklearnGrid, TorchWorkload, check_user_grid
from ..store import BlobStore, Job, JobStatus, Store, Task, User
from ..store.base import HUB
from ..fitted_calls import unpacked
from ..user_sandbox import (
    JobScope,
    UserModelError,
    UserModelTimeout,
    build_net,
    checked_estimator,
    close_job,
    fit_sealed,
    load_code,
    predict_sealed,
    run_user_code,
)
from ..zoo import Candidate, Engine, ModelConfig, Workload
from .quota import Quota

TAG_PREFIX = "easeml.user_model."
ALLOW_TAG = "easeml.allow_user_models"  # a user tag: "true" or "false", set by an admin
DEFAULT_LIMIT_SECONDS = 600.0  # a user model's job, unless the service or the user says otherwise
MAX_TRACEBACK_CHARS = 20_000
MAX_MODELS_PER_TASK = 32  # with the quota, what her models' code may take
KINDS = {"estimator": Engine.SKLEARN, "factory": Engine.TORCH}
AS_GIVEN = ("params", "as given")  # the one grid point of an estimator added without a grid (``Guarded``)
TRAIN_OPTIONS = ("lr", "batch_size", "momentum", "weight_decay", "clip")  # the units' own, never the factory's




# -- the record ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserModel:
    """One user model of a task, as stored (JSON in the task tag)."""

    name: str
    kind: str  # "estimator" | "factory"
    grid: dict[str, list[Any]]
    code: str  # blob digest of the cloudpickled object
    limit: float  # seconds a job of it may run
    size: int  # bytes of the code
    described: str  # what the client said it is: "sklearn.pipeline.Pipeline", "__main__.make_net"
    created_at: float

    @property
    def engine(self) -> Engine:
        return KINDS[self.kind]

    def spec(self, torch_epochs: int) -> JobSpec:
        """The job a pick of this arm trains."""
        if self.engine is Engine.SKLEARN:  # no grid: one config, the estimator as it was given
            grid = self.grid or {AS_GIVEN[0]: [AS_GIVEN[1]]}
            return SklearnGrid(self.name, tuple((k, tuple(v)) for k, v in grid.items()), self.code, self.limit)
        lrs = tuple(float(v) for v in self.grid.get("lr", DEFAULT_LRS))
        options = tuple((k, tuple(v)) for k, v in self.grid.items() if k != "lr")
        return TorchWorkload(self.name, lrs, int(torch_epochs), options, self.code, self.limit)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class UserModels:
    """The one accessor of the user-model records: reserved tags of their task."""

    def __init__(self, store: Store):
        self.store = store

    def list(self, task_id: int) -> list[UserModel]:
        """The task's user models, oldest first."""
        found = [UserModel(**json.loads(v)) for k, v in self.store.tags("task", task_id).items()
                 if k.startswith(TAG_PREFIX)]
        return sorted(found, key=lambda m: (m.created_at, m.name))

    def get(self, task_id: int, name: str) -> UserModel | None:
        raw = self.store.tags("task", task_id).get(TAG_PREFIX + name)
        return None if raw is None else UserModel(**json.loads(raw))

    def put(self, task_id: int, model: UserModel) -> None:
        self.store.set_tag("task", task_id, TAG_PREFIX + model.name, json.dumps(model.to_json()))


def code_bytes(store: Store, owner_id: int) -> int:
    """The bytes of the code of every user model of ``owner_id``'s tasks."""
    models = UserModels(store)
    return sum(m.size for t in store.list_tasks(owner_id) for m in models.list(t.id))


def blob_references(store: Store) -> Iterable[tuple[str, str]]:
    """(digest, holder) of every user model's code, for the blob GC's mark."""
    for task in store.list_tasks():
        for model in UserModels(store).list(task.id):
            yield model.code, f"task {task.id} user model {model.name!r}"


# -- permission ------------------------------------------------------------------------------------


def user_setting(store: Store, user: User) -> bool | None:
    """An admin's setting for ``user``: True, False, or None (the service's default)."""
    raw = store.tags("user", user.id).get(ALLOW_TAG)
    return None if raw is None else raw == "true"


def set_user_setting(store: Store, user: User, allow: bool) -> None:
    store.set_tag("user", user.id, ALLOW_TAG, "true" if allow else "false")


def check_allowed(store: Store, user: User, default: bool) -> None:
    """``PermissionError`` (a 403) naming the settings, unless ``user`` may add models."""
    setting = user_setting(store, user)
    if setting if setting is not None else default:
        return
    how = "an admin turned it off for you" if setting is False else "this service runs without --allow-user-models"
    raise PermissionError(
        f"user models: not allowed for user {user.name!r} ({how}); an admin can allow them with "
        f"`easeml users allow-models {user.name}{' --hub' if user.origin == HUB else ''}` or "
        f"PUT /api/v1/users/{user.name} "
        '{"allow_user_models": true}, or start the service with --allow-user-models')


# -- adding one (the service, from the request; no unpickling) ----------------------------------


def decode_code(payload: Any) -> bytes:
    if not isinstance(payload, str) or not payload:
        raise DataError("code", type(payload).__name__, "the base64 of the cloudpickled estimator or factory")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise DataError("code", "text that is not base64", "the base64 of the cloudpickled estimator or factory") from None


def add_model(store: Store, blobs: BlobStore, task: Task, body: Mapping[str, Any], *, zoo_names: Iterable[str],
              max_limit: float, check_name: Callable[[str, Any], str], quota: Quota | None = None) -> UserModel:
    """Check a request's user model and store it (blob, then record); every
    check comes first, so bad input stores nothing. ``quota``: the code of
    all her models, this one's too, must fit beside her stored data."""
    name = check_name("name", body.get("name"))
    if name in set(zoo_names):
        raise DataError("name", repr(name), "a name that is not a zoo model's (easeml models lists them)")
    kind = body.get("kind")
    if kind not in KINDS:
        raise DataError("kind", repr(kind), " or ".join(map(repr, KINDS)))
    grid = check_user_grid(body.get("grid"), kind)
    limit = body.get("limit", max_limit)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (math.isfinite(limit) and limit > 0):
        raise DataError("limit", repr(limit), "a positive number of seconds")
    if limit > max_limit:
        raise DataError("limit", f"{limit:g} s", f"at most {max_limit:g} s (the service's --user-model-timeout)")
    described = body.get("described", "")
    if not isinstance(described, str):
        raise DataError("described", type(described).__name__, "a string")
    code = decode_code(body.get("code"))
    models = UserModels(store)
    if models.get(task.id, name) is not None:
        raise AlreadyExistsError(f"task {task.name!r} has a user model {name!r} already: add this one under "
                                 "another name (name=...)")
    if len(models.list(task.id)) >= MAX_MODELS_PER_TASK:
        raise DataError("name", f"a model beyond the task's {MAX_MODELS_PER_TASK}",
                        f"at most {MAX_MODELS_PER_TASK} user models per task")
    if quota is not None:  # her models' code counts with her data (code_bytes)
        quota.check(store, blobs, task.owner_id, len(code) + code_bytes(store, task.owner_id),
                    what=f"user model {name!r} of task {task.name!r} (with the code of your other models)")
    model = UserModel(name, kind, grid, blobs.put_bytes(code), float(limit), len(code), described[:200], time.time())
    models.put(task.id, model)
    return model


def arm_specs(store: Store, task: Task, torch_epochs: int | None) -> dict[str, JobSpec]:
    """The task's user models as arms (a factory only where torch jobs can run)."""
    return {m.name: m.spec(torch_epochs) for m in UserModels(store).list(task.id)
            if m.engine is Engine.SKLEARN or torch_epochs is not None}


def last_measured_seconds(store: Store, task: Task, name: str) -> float | None:
    """The seconds the arm ``name``'s last finished job on the task took; None before one."""
    done = [j for j in store.list_jobs(task.id, status=JobStatus.SUCCEEDED) if j.model == name and j.cost_seconds]
    return float(done[-1].cost_seconds) if done else None


def neutral_seconds(store: Store, task: Task, name: str, others: Iterable[float]) -> float:
    """A user arm's cost before it ran on this task: the median of the
    task's other arms (a neutral prior, neither cheap nor dear); once it ran,
    its last measured seconds."""
    measured = last_measured_seconds(store, task, name)
    if measured is not None:
        return max(measured, 1e-3)
    values = sorted(others)
    return values[len(values) // 2] if values else 1.0


# -- in the worker: user code as a candidate ---------------------------------------------------------


def _classification(task: Task) -> bool:
    from ..datasets import program_of

    return program_of(task).num_classes is not None


def net_shapes(task: Task) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """One example's input and output shapes; a user net takes one tensor in and gives one out."""
    from ..datasets import program_of

    program = program_of(task)
    for field, side in (("input", program.input), ("output", program.output)):
        if len(side.tensors) != 1 or side.is_recursive:
            raise DataError(field, str(side), "one tensor and no recursive field, for a user's torch model")
    return tuple(program.input.tensors[0].shape), tuple(program.output.tensors[0].shape)


def user_candidate(task: Task, spec: JobSpec, blobs: BlobStore, *, started: float | None = None) -> Candidate:
    """The candidate of a job that trains a user model (``spec.code``): its
    code loaded here, where the job runs. An estimator's every call is
    bounded by the job's deadline (``started`` + ``spec.limit``); a net's by
    the running time of the job's units (``NetBuilder``)."""
    code = blobs.get_referenced(spec.code, f"task {task.name!r}: the code of user model {spec.model!r}")
    classification = _classification(task)
    if spec.engine is Engine.SKLEARN:
        deadline = (time.time() if started is None else started) + float(spec.limit)
        scope = JobScope(deadline)  # the job's children end when its candidate is dropped, at the job's end
        build: Callable[[ModelConfig], Any] = EstimatorBuilder(spec.model, code, deadline, scope)
        workload = Workload.FLAT_CLASSIFICATION if classification else Workload.FLAT_REGRESSION
    else:
        inp, out = net_shapes(task)
        build = NetBuilder(spec.model, code, inp, out, classification, float(spec.limit))
        workload = Workload.GENERAL_CLASSIFICATION if classification else Workload.TENSOR_RECOVERY
    configs = tuple(ModelConfig.of(spec.model, p) for p in spec.points())
    return Candidate(spec.model, "user", workload, spec.engine, configs, 1.0, (), build)


@dataclass(frozen=True)
class Sealed:
    """Her estimator as the bytes of its cloudpickle. This process holds,
    copies and pickles it without running any of her code (pickled, it is
    these bytes again); only her job's child loads it (``fit_sealed``,
    ``predict_sealed``)."""

    data: bytes


def _sealed_reply(reply: Any, what: str) -> tuple[dict[str, Any], bytes]:
    """A packed reply of her child's; one that is not (her code wrote to its
    pipe) is her model's error."""
    try:
        return unpacked(reply)
    except ValueError as error:
        raise UserModelError(f"{what}: its process answered something else than a packed reply ({error})") from None


@dataclass(frozen=True)
class EstimatorBuilder:
    """The user's estimator, checked in the job's child process and guarded
    (``Guarded``) as its bytes: never loaded here."""

    name: str
    code: bytes
    deadline: float
    scope: JobScope | None = None  # held while the job's candidate lives

    def __call__(self, config: ModelConfig) -> Any:
        what = f"loading user model {self.name!r}"
        header, _ = _sealed_reply(run_user_code(checked_estimator, self.code, deadline=self.deadline, what=what,
                                                returns="array"), what)
        refused = header.get("error")
        if isinstance(refused, dict):
            raise DataError(str(refused.get("field")), str(refused.get("found")), str(refused.get("expected")))
        return Guarded(Sealed(self.code), self.deadline, self.name)


class Guarded(BaseEstimator):
    """The user's estimator (``Sealed``), each fit and predict run in the
    job's child process (bounded by the job's deadline) and the output's
    shape checked. Options set on it are kept and set on a copy of the
    estimator in the child before it fits (the grid's keys are the
    estimator's own: ``C``, ``svc__C`` for a pipeline step): cloning this,
    setting options on it, fitting it or pickling it runs none of her code
    here; the fitted estimator comes back sealed. The job's artifact is that
    estimator, unwrapped (``artifact``)."""

    _options: Mapping[str, Any] = MappingProxyType({})  # set_params' options, until fit
    _fitted = False

    def __init__(self, estimator: Sealed | None = None, deadline: float = math.inf, name: str = "user model",
                 params: str = AS_GIVEN[1]):
        self.estimator = estimator
        self.deadline = deadline
        self.name = name
        self.params = params  # names the one config of an estimator added without a grid

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Its own four parameters only, ``deep`` or not: her estimator's are read in the child."""
        return {"estimator": self.estimator, "deadline": self.deadline, "name": self.name, "params": self.params}

    def set_params(self, **params: Any) -> "Guarded":
        for key in ("estimator", "deadline", "name", AS_GIVEN[0]):
            if key in params:
                setattr(self, key, params.pop(key))
        if params:
            self._options = {**self._options, **params}
        return self

    def __sklearn_clone__(self) -> "Guarded":
        """An unfitted copy holding the same estimator (fit copies it in the child, never changes it)."""
        copy = Guarded(self.estimator, self.deadline, self.name, self.params)
        copy._options = dict(self._options)
        return copy

    def __sklearn_is_fitted__(self) -> bool:
        """Fitted once its fit returned (a pipeline around this asks before predicting)."""
        return self._fitted

    def fit(self, X: Any, y: Any) -> "Guarded":
        # copied, given its options and fitted in the job's child process: that copy comes back, sealed
        what = f"{self.name}.fit"
        _, data = _sealed_reply(run_user_code(fit_sealed, self._sealed().data, dict(self._options), X, y,
                                              deadline=self.deadline, what=what, returns="array"), what)
        self.estimator, self._options, self._fitted = Sealed(data), {}, True
        return self

    def predict(self, X: Any) -> Any:
        out = run_user_code(predict_sealed, self._sealed().data, X, deadline=self.deadline,
                            what=f"{self.name}.predict", returns="array")  # a numpy array, loaded without pickle
        if out.ndim == 0 or out.shape[0] != len(X):
            raise DataError(f"{self.name}.predict", f"shape {out.shape}", f"({len(X)},): one output per example")
        return out

    def _sealed(self) -> Sealed:
        if not isinstance(self.estimator, Sealed):
            raise TypeError(f"{self.name}: holds {type(self.estimator).__name__}, expected her estimator sealed")
        return self.estimator


class _Unsealed:
    """Her sealed estimator inside a pickle made here (a table task's
    pipeline around it): dumped as a call that loads her bytes, so the
    pickle loads as her estimator wherever it is loaded, and making it runs
    none of her code."""

    def __init__(self, sealed: Sealed):
        self.data = sealed.data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return pickle.loads, (self.data,)


def artifact(model: Any) -> bytes:
    """What a user sklearn job stores: its fitted estimator itself (cloudpickled,
    so a class defined in a notebook loads where cloudpickle is installed),
    or the pipeline around it with her estimator in its place."""
    import cloudpickle

    if isinstance(model, Guarded):
        return model._sealed().data  # her fitted estimator's own cloudpickle, from her child
    return cloudpickle.dumps(unwrap(model))


def unwrap(model: Any) -> Any:
    """``model`` with every ``Guarded`` replaced by the estimator inside it
    (also as a step of a pipeline that a table task's preprocessing put around it)."""
    if isinstance(model, Guarded):
        return _Unsealed(model._sealed())
    steps = getattr(model, "steps", None)
    if isinstance(steps, list):
        model.steps = [(name, unwrap(step)) for name, step in steps]
    return model


@dataclass(frozen=True)
class NetBuilder:
    """The user's net for one config: ``factory(input_shape, output_shape,
    **options)``, the options being the config's less the training ones
    (``lr``, ``batch_size``, ...), wrapped as a zoo net (``UserNet``).

    It is built where a unit runs, each time in a child of its own, bounded
    by her whole ``limit`` and closed once the net is built: her job's limit
    is the running time of its units, which the pool driver charges
    (``mop._OwnModel``), so no wall-clock deadline set when her job started
    may end a unit that waited for a worker behind other users' units.

    ``seed``: the child seeds its generators with it before her factory
    runs, so a trial's first weights are the same in every run, as a zoo
    net's (``units.build_net`` sets it for a trial's first build only; a
    later build of the trial loads its checkpoint's weights)."""

    # Built in the job's child process (``run_user_code``): no draws from this
    # process's global generator, so ``units.build_net`` takes no lock for it.
    draws_global_rng: ClassVar[bool] = False

    name: str
    code: bytes
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    classification: bool
    limit: float
    seed: int | None = None

    def with_seed(self, seed: int) -> "NetBuilder":
        return replace(self, seed=int(seed))

    def __call__(self, config: ModelConfig) -> Any:
        deadline = time.time() + self.limit
        try:
            factory = run_user_code(load_code, self.code, deadline=deadline,
                                    what=f"loading user model {self.name!r}")
            if not callable(factory):
                raise DataError("factory", type(factory).__name__, "a function that builds a torch nn.Module")
            options = {k: v for k, v in config.options.items() if k not in TRAIN_OPTIONS}
            return user_net(self.name, factory, self.input_shape, self.output_shape, self.classification,
                            options, deadline, self.seed)
        finally:
            close_job(deadline)


def user_net(name: str, factory: Callable[..., Any], input_shape: tuple[int, ...], output_shape: tuple[int, ...],
             classification: bool, options: Mapping[str, Any], deadline: float, seed: int | None = None) -> Any:
    import torch
    import torch.nn.functional as F
    from torch import nn

    from ..zoo.nets import ZooModule

    class UserNet(ZooModule):
        """The user's ``nn.Module`` (``net``) in the zoo's protocol: cross-entropy
        on logits for classification, mean squared error otherwise."""

        def __init__(self) -> None:
            super().__init__(input_shape, output_shape)
            self.task = "classification" if classification else "regression"
            self._name = name
            # built, and run once, in the job's child process: a factory or net that hangs there is killed
            net = run_user_code(build_net, factory, tuple(input_shape), tuple(output_shape), dict(options), seed,
                                deadline=deadline, what=f"{name}(input_shape, output_shape, **{dict(options)}) "
                                f"and {name}.forward on a first batch")
            if not isinstance(net, nn.Module):
                raise DataError(f"{name}(...)", f"a {type(net).__name__}", "a torch nn.Module")
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # in the worker, on its thread: a forward that never returns is given up on with its unit at
            # the job's limit, and its worker replaced (``MOPRunner.time_budget``, ``mop._OwnModel``)
            try:
                out = self.net(x)
            except Exception as error:  # noqa: BLE001 - her own traceback, for her
                raise UserModelError(f"{self._name}.forward raised:\n"
                                     f"{traceback.format_exc()[-MAX_TRACEBACK_CHARS:]}") from error
            want = (x.shape[0], *self.output_shape)
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
                found = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
                raise DataError(f"{self._name}.forward", found, f"a tensor of shape {want} (n, *output shape)")
            return out

        def loss(self, out: torch.Tensor, y: Any) -> torch.Tensor:
            if self.task == "classification":
                return super().loss(out, y)
            y = y if isinstance(y, torch.Tensor) else torch.as_tensor(y)
            return F.mse_loss(out, y.to(out.dtype).reshape(out.shape))

    return UserNet()


def plain_module(net: Any) -> Any:
    """The user's own ``nn.Module`` inside a loaded user net (what TorchScript
    and ONNX export), or ``net`` itself for a zoo net."""
    return getattr(net, "net", net) if type(net).__name__ == "UserNet" else net


def torch_module(store: Store, blobs: BlobStore, task: Task, job: Job) -> Any:
    """A finished user torch job's trained ``nn.Module``: the user's own
    module with the best config's weights, on the CPU, in eval mode."""
    from .models import torch_net

    return plain_module(torch_net(store, blobs, task, job)).eval()


# -- failures ----------------------------------------------------------------------------------------


def fail_any_job(store: Store, job: Job, error: BaseException, *, earlier_seconds: float = 0.0) -> Job:
    """Record a failed job: a user model's with her own traceback
    (:func:`fail_user_job`), any other's as usual (a config that does not
    even parse is not a user model's). ``earlier_seconds``: see
    ``failures.mark_failed``."""
    from ..jobspec import parse_job
    from .failures import fail_job

    try:
        own = parse_job(job.model, job.config).is_user_model
    except Exception:  # noqa: BLE001 - the job fails for that reason below
        own = False
    return (fail_user_job if own else fail_job)(store, job.id, error, earlier_seconds=earlier_seconds)


def fail_user_job(store: Store, job_id: int, error: BaseException, *, earlier_seconds: float = 0.0) -> Job:
    """Fail a user model's job with an error its owner can act on: the
    job's error, then the user code's own (``UserModelError`` carries her
    traceback), not the service's frames; a storage failure as
    any job's."""
    from .failures import fail_job, mark_failed, storage_code

    if storage_code(error) is not None:
        return fail_job(store, job_id, error)  # the service's failure: nothing of it is paid
    parts = ["".join(traceback.format_exception_only(type(error), error)).strip()]
    cause, seen = error.__cause__, 0
    while cause is not None and seen < 8:  # a MOP workload wraps its unit's error: the user's is inside
        if isinstance(cause, (UserModelError, UserModelTimeout, DataError)):
            parts.append(f"{type(cause).__name__}: {cause}")
        cause, seen = cause.__cause__, seen + 1
    text = "\n".join(parts)
    return mark_failed(store, job_id, text[-MAX_TRACEBACK_CHARS:], earlier_seconds=earlier_seconds)


def config_points(spec: JobSpec) -> list[dict[str, Any]]:
    """The configs of a spec (for messages and tests)."""
    return list(spec.points())


# -- the API (``Service`` delegates here) --------------------------------------------------------------


def zoo_names(task: Task) -> set[str]:
    """Names a user model may not take: the zoo's catalogue and the task's own candidates."""
    from .candidates import task_candidates
    from .loop.costs import catalogue

    return set(_catalogue_names(catalogue)) | set(task_candidates(task))


_CATALOGUE: tuple[str, ...] | None = None


def _catalogue_names(catalogue: Callable[[], tuple[list[str], Any]]) -> tuple[str, ...]:
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = tuple(catalogue()[0])
    return _CATALOGUE


def api_add(service: Any, caller: User, name: str, body: Any) -> dict[str, Any]:
    """``POST /tasks/{name}/models``: 403 unless the caller may add models;
    then every check, then the blob and the record; the loop takes the arm
    in at its next turn."""
    from .auth import check_name

    check_allowed(service.store, caller, service.config.allow_user_models)
    task = service._task(caller, name)
    if not isinstance(body, Mapping):
        raise DataError("body", type(body).__name__, "a JSON object")
    model = add_model(service.store, service.blobs, task, body, zoo_names=zoo_names(task),
                      max_limit=service.config.user_model_timeout, check_name=check_name, quota=service.quota)
    service.loop.models_changed(task.id)  # its arms are made again
    service.events.publish(caller.id, {"type": "task", "task_id": task.id, "name": task.name,
                                       "status": "model_added", "model": model.name})
    return model.to_json()


def api_list(service: Any, caller: User, name: str) -> list[dict[str, Any]]:
    """``GET /tasks/{name}/models``: the task's user models."""
    return [m.to_json() for m in UserModels(service.store).list(service._task(caller, name).id)]


USER_FIELDS = ("allow_user_models", "admin")  # what PUT /users/{name} sets


def api_set_user(service: Any, caller: User, name: str, body: Any, origin: str | None = None) -> dict[str, Any]:
    """``PUT /users/{name}[?origin=local|hub]`` (admins): ``{"allow_user_models":
    true|false, "admin": true|false}``, either or both (null, the service's
    default again, is not offered), for the one account
    ``budget_api.user_named`` addresses; every field is checked before any
    is stored. ``admin`` is for local accounts: a hub user's rights follow
    the hub (400 naming ``admin``). An admin cannot take her own rights
    (409; another admin can, or ``easeml users admin NAME --off``), so the
    caller stays an admin and the service never runs out of them. A changed
    flag applies at her next request (the token cache forgets her), and
    her open event streams end at once. The answer: her name and the
    fields set."""
    from ..errors import InvalidStateError
    from .budget_api import user_named

    if not caller.is_admin:
        raise PermissionError("admin rights needed")
    user = user_named(service, name, origin)
    if not isinstance(body, Mapping) or not body or set(body) - set(USER_FIELDS):
        raise DataError("body", repr(body)[:80], '{"allow_user_models": true or false, "admin": true or false} '
                        "(either or both)")
    for field in USER_FIELDS:
        if field in body and not isinstance(body[field], bool):
            raise DataError(field, repr(body[field]), "true or false")
    admin = body.get("admin")
    if admin is not None and user.origin == HUB:
        raise DataError("admin", f"{admin} for hub user {user.name!r}",
                        "no admin field for a hub user: her admin rights follow the hub (a hub admin, or the "
                        "custom:easeml:admin scope), so change them there")
    if admin is False and user.id == caller.id:
        raise InvalidStateError(f"user {user.name!r} is the caller: an admin cannot take her own admin rights "
                                "here; another admin can, or `easeml users admin NAME --off` on the database")
    if "allow_user_models" in body:
        set_user_setting(service.store, user, body["allow_user_models"])
    if admin is not None and admin != user.is_admin:
        user = service.store.set_user_admin(user.id, admin)
        service.rights_changed(user.id)
    return {"name": user.name, **{field: body[field] for field in USER_FIELDS if field in body}}

