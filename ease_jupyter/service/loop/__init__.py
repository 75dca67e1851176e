"""The control loop: one thread that owns time (ease.ml §5; ACAI §3.3).

Each turn it (1) collects finished jobs and reports them to the selector,
(2) brings the selector's tenants in line with the store (new tasks, new
dataset versions, cancelled tasks), (3) starts queued jobs FIFO while workers
are free and their owner is under the cap of ``k`` running jobs, and (4) asks
the selector once for as many new picks as there are free workers; each pick
carries its own explanation (``selection.Pick``).

Selector tenants are (task, dataset version) pairs named ``"<task id>/<version
id>"``; their arms are the task's candidate models: one per scikit-learn
candidate (a pick trains its hyperparameter grid, ``runner.py``) and, when a
torch executor is registered, one per torch candidate (a pick trains its
learning-rate grid as one MOP workload, ``mop.py``); ease.ml pvldb §3. A new
feed or refine replaces the tenant, so results on the old version are stale
and are no longer reported. The selector's state is saved (at most every
``save_every_seconds``, and on stop) as a blob, and the newest job carries a
tag pointing at it; a restarted loop restores it, reconciles it with the jobs
in the store and re-queues the jobs that were left running.

One module per job, sharing one ``state.LoopState`` under the loop's lock:

* ``control``: ``ControlLoop``, the thread and the order of a turn;
* ``outage``: waiting out a store that cannot be written (back-off);
* ``recovery``: re-queue, restore and reconcile at start; the saved state;
* ``tenants``: tenant sync with the store;
* ``results``: finished jobs to the selector; holds after storage failures;
* ``admission``: queued jobs, then picks, under the per-owner cap and per-engine slots;
* ``budget``: owners over their compute budget or past their deadline (no new picks), and a torch pick's epochs;
* ``costs``: the model catalogue and each arm's estimated seconds;
* ``views``: the idle view read without the lock, and the other read views.
"""

from .control import ControlLoop
from .costs import catalogue
from .recovery import STATE_TAG, saved_state_digest
from .state import arm_key

__all__ = ["ControlLoop", "STATE_TAG", "arm_key", "catalogue", "saved_state_digest"]
