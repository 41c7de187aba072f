"""A reflector's store: records by (namespace, name), held without a key object per record.

A dictionary keyed by (namespace, name) tuples holds a tuple per object for as long as the
object exists, and that tuple holds the name string of the object's first event, while the
record holds the string of its latest one: at 150,000 daemon pods, the tuples and the second
strings are a tenth of the operator's memory. Here each namespace has a dictionary of names,
and a record replaced is stored under the name string of the event that brought it, which is
the string the record itself holds (`Store.put`): one string per object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from typing import TypeVar, overload

Record = TypeVar("Record")
Default = TypeVar("Default")
# (namespace, name); the namespace is "" for cluster-scoped kinds.
ObjectKey = tuple[str, str]
_ABSENT = object()


class Store(MutableMapping[ObjectKey, Record]):
    __slots__ = ("_by_namespace", "_count")

    def __init__(self, records: Iterable[tuple[ObjectKey, Record]] = ()) -> None:
        self._by_namespace: dict[str, dict[str, Record]] = {}
        self._count = 0
        for key, record in records:
            self[key] = record

    def __getitem__(self, key: ObjectKey) -> Record:
        namespace, name = key
        return self._by_namespace[namespace][name]

    @overload
    def get(self, key: ObjectKey, /) -> Record | None: ...
    @overload
    def get(self, key: ObjectKey, default: Record | Default, /) -> Record | Default: ...
    def get(self, key: ObjectKey, default: object = None, /) -> object:
        # Mapping's own get would raise and catch a KeyError for every object not stored yet.
        names = self._by_namespace.get(key[0])
        return default if names is None else names.get(key[1], default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        names = self._by_namespace.get(key[0])
        return names is not None and key[1] in names

    def __setitem__(self, key: ObjectKey, record: Record) -> None:
        """Stored under `key`'s own name string: the old entry, if any, goes first, so that
        the string its first event brought is let go (a dictionary keeps the key it has)."""
        namespace, name = key
        names = self._by_namespace.get(namespace)
        if names is None:
            names = self._by_namespace[namespace] = {}
        if names.pop(name, _ABSENT) is _ABSENT:
            self._count += 1
        names[name] = record

    def __delitem__(self, key: ObjectKey) -> None:
        namespace, name = key
        names = self._by_namespace[namespace]
        del names[name]
        self._count -= 1
        if not names:
            del self._by_namespace[namespace]

    def __iter__(self) -> Iterator[ObjectKey]:
        for namespace, names in self._by_namespace.items():
            for name in names:
                yield namespace, name

    def __len__(self) -> int:
        return self._count

    def names(self, namespace: str = "") -> Iterable[str]:
        """The names stored in `namespace`, without building a key for each."""
        return self._by_namespace.get(namespace, {}).keys()

    def clear(self) -> None:
        self._by_namespace.clear()
        self._count = 0

    def replace(self, records: Mapping[ObjectKey, Record]) -> None:
        """Every record at once, in place: views of this store stay views of the live one."""
        self.clear()
        for key, record in records.items():
            self[key] = record

    def __repr__(self) -> str:
        return f"Store({dict(self.items())!r})"
