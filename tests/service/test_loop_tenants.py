"""``loop.state.Tenants``: the tenants by name, and how many owners have one."""

from __future__ import annotations

import random

import pytest

from ease_jupyter.service.loop.state import Tenant, Tenants


def tenant(owner_id: int) -> Tenant:
    return Tenant(task_id=owner_id * 10, owner_id=owner_id, version_id=1, configs={})


def test_the_owner_count_follows_every_add_replace_and_delete():
    rng = random.Random(0)
    tenants = Tenants()
    for _ in range(2000):
        name = f"t{rng.randrange(30)}"
        if name in tenants and rng.random() < 0.4:
            del tenants[name]
        else:
            tenants[name] = tenant(rng.randrange(8))  # a new tenant, or another owner's under the same name
        assert tenants.owners() == len({t.owner_id for t in tenants.values()})
    assert tenants.owners() > 0


def test_replacing_a_tenant_moves_its_owner():
    tenants = Tenants()
    tenants["a"] = tenant(1)
    tenants["b"] = tenant(1)
    tenants["a"] = tenant(2)
    assert tenants.owners() == 2
    del tenants["b"]
    assert tenants.owners() == 1 and dict(tenants) == {"a": tenant(2)}


@pytest.mark.parametrize("change", [lambda t: t.pop("a"), lambda t: t.clear(), lambda t: t.update(b=tenant(2)),
                                    lambda t: t.setdefault("b", tenant(2)), lambda t: t.popitem()])
def test_changes_that_would_bypass_the_count_are_refused(change):
    tenants = Tenants()
    tenants["a"] = tenant(1)
    with pytest.raises(TypeError, match="by item"):
        change(tenants)
    assert tenants.owners() == 1
