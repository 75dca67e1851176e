"""Contract test suites for third-party backends, as ``optuna.testing`` ships its own.

* ``ease_jupyter.testing.store_contract``: every ``Store`` backend
  (``ease_jupyter/store/base.py``). Fixture to provide: ``store``.
* ``ease_jupyter.testing.engine_contract``: every execution ``Engine``
  (``ease_jupyter/execution/engine/base.py``). Fixtures: ``engine``, ``fresh_engine``.
* ``ease_jupyter.testing.executor_contract``: every job executor
  (``ease_jupyter/service/executors.py``). Fixtures: ``stores``,
  ``executor_factory`` (and ``process_executor_factory``).

Each suite is a module of ``test_*`` functions. A test module runs one by
``from ease_jupyter.testing.<suite> import *`` and by providing the fixtures
above (each suite's docstring shows how). ``tests/`` runs all three against
our own backends.

These modules need pytest, a test dependency (the ``test`` extra): nothing in
``ease_jupyter`` outside this package imports it.
"""

import pytest

# The suites' plain ``assert``s explain their failures as a test module's do.
# This must run before a suite is imported, hence here, in the package.
_SUITES = ("store_contract", "engine_contract", "executor_contract")
pytest.register_assert_rewrite(*(f"{__name__}.{suite}" for suite in _SUITES))
