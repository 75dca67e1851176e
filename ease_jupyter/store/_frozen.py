"""Deep-frozen copies of JSON-like values.

Records must be immutable (base.py), but ``Job.config`` and ``Store.tags`` are
mappings. ``types.MappingProxyType`` would do, except that ``json.dumps``
rejects it and the service serialises configs to JSON all the time. A ``dict``
subclass whose mutators raise keeps both properties: ``json.dumps`` sees a dict,
and nobody can change it in place.
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn


class FrozenDict(dict):
    """A read-only, hashable ``dict``.

    Its values should be frozen too (see ``freeze``); ``hash`` fails otherwise.
    """

    __slots__ = ()

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("FrozenDict is read-only; take a copy with dict(...) to change it")

    __setitem__ = __delitem__ = _readonly  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]
    __ior__ = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[Any, ...]:
        # copy/pickle would otherwise rebuild us through __setitem__.
        return (FrozenDict, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


def freeze(value: Any) -> Any:
    """Return ``value`` with every dict replaced by a FrozenDict and every list by a tuple."""
    if isinstance(value, Mapping):
        return FrozenDict((key, freeze(item)) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of ``freeze``: plain dicts and lists, e.g. to store as JSON."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value
