"""The query tables kept as Arrow columns: a row dict is built only when one is read.

At a million documents the store's tables held as Python dicts of row dicts took ~30 GB (each
value a Python object, each row a dict), against 0.2-1.9 GB per table as Arrow
(tests/benchmarks/results/scale.json, the 1M entity_dense entry's local_context). `Rows` keeps one table
that way and still reads as the mapping of id -> row dict the query code was written against
(`store.entities[eid]["title"]`, `eid in store.entities`, `len(store.units)`), so readers that
look at a few rows need no change; readers that touch many rows use the column paths
(`value`, `numpy`, `positions_of`) and integer positions instead.

`CsrMap` is a one-to-many lookup (an entity's relationships, its communities, its claims) as
two integer arrays in compressed sparse row form, read as a mapping of id -> list of ids.
"""

from __future__ import annotations

from collections.abc import ItemsView, Mapping, ValuesView
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Rows", "CsrMap", "UnitDomains", "ids_array"]

# Rows converted per batch when a whole table is walked (values(), items()).
_BATCH_ROWS = 8192


def _large(table: pa.Table) -> pa.Table:
    """Top-level string columns as large_string, so one column of more than 2 GB of text (a
    million documents' units) can be one array, and each column as a single chunk."""
    fields, columns = [], []
    for field, column in zip(table.schema, table.columns):
        if pa.types.is_string(field.type):
            column, field = column.cast(pa.large_string()), field.with_type(pa.large_string())
        fields.append(field)
        columns.append(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def ids_array(values: Sequence[str] | pa.Array | pa.ChunkedArray) -> pa.Array:
    """Ids as one large_string array, the type every `Rows` keys on."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = pa.array(list(values), type=pa.large_string())
    return values.cast(pa.large_string()) if not pa.types.is_large_string(values.type) else values


class _Values(ValuesView):
    def __iter__(self):
        return self._mapping.iter_rows()


class _Items(ItemsView):
    def __iter__(self):
        return zip(self._mapping.ids, self._mapping.iter_rows())


class Rows(Mapping):
    """One table, id -> row dict, kept as Arrow columns.

    `fill` gives a column's value where the table has a null (rows.py's one meaning of a null);
    a row read is a new dict each time, so a reader may change it without changing the table.
    A repeated id keeps its last row, as a dict built from the rows would.
    """

    def __init__(self, table: pa.Table, key: str, fill: Mapping[str, Any] | None = None):
        table = _large(table)
        ids: list[str] = table.column(key).to_pylist()
        index = {k: i for i, k in enumerate(ids)}
        if len(index) < len(ids):
            keep = np.fromiter(sorted(index.values()), dtype=np.int64, count=len(index))
            table = table.take(pa.array(keep))
            ids = [ids[i] for i in keep]
            index = {k: i for i, k in enumerate(ids)}
        self.key = key
        self.table = table
        self.ids = ids
        self._index = index
        self._columns: dict[str, pa.Array] = dict(zip(table.column_names, table.columns))
        self._fill = dict(fill or {})
        self._numpy: dict[str, np.ndarray] = {}

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping], key: str, schema: pa.Schema,
                  fill: Mapping[str, Any] | None = None) -> Rows:
        """Rows from row dicts (a restricted view's), typed by `schema`; keys outside it are dropped."""
        names = set(schema.names)
        return cls(pa.Table.from_pylist([{k: v for k, v in r.items() if k in names} for r in rows], schema=schema),
                   key, fill)

    # -- the mapping ------------------------------------------------------------------------

    def __getitem__(self, key: str) -> dict:
        i = self._index[key]
        return self._row(i)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def get(self, key, default=None):
        i = self._index.get(key)
        return default if i is None else self._row(i)

    def values(self) -> _Values:
        return _Values(self)

    def items(self) -> _Items:
        return _Items(self)

    def __repr__(self) -> str:
        return f"Rows({self.key}: {len(self)} rows, columns {self.table.column_names})"

    def _row(self, i: int) -> dict:
        row = {name: column[i].as_py() for name, column in self._columns.items()}
        for name in self._fill:
            if row.get(name) is None:
                row[name] = self._filled(name)
        return row

    def iter_rows(self) -> Iterator[dict]:
        """Every row in table order, converted a batch at a time."""
        for batch in self.table.to_batches(_BATCH_ROWS):
            for row in batch.to_pylist():
                for name in self._fill:
                    if row.get(name) is None:
                        row[name] = self._filled(name)
                yield row

    # -- the column paths --------------------------------------------------------------------

    def position(self, key) -> int | None:
        """The row position of an id, or None."""
        return self._index.get(key)

    def column(self, name: str) -> pa.Array:
        return self._columns[name]

    def value(self, key, name: str, default=None):
        """One column of one row (filled as the row would be), or `default` when the id is absent."""
        i = self._index.get(key)
        if i is None:
            return default
        v = self._columns[name][i].as_py()
        return self._filled(name) if v is None else v

    def _filled(self, name: str):
        fill = self._fill.get(name)
        return list(fill) if isinstance(fill, list) else fill

    def numpy(self, name: str, fill: float | int = 0, dtype=np.float64) -> np.ndarray:
        """A numeric column as one numpy array, nulls as the table's fill (else `fill`); kept."""
        cached = self._numpy.get(name)
        if cached is None:
            column = self._columns[name]
            default = self._fill.get(name, fill)
            cached = np.asarray(pc.fill_null(column, default).to_numpy(zero_copy_only=False), dtype=dtype) \
                if len(column) else np.zeros(0, dtype=dtype)
            self._numpy[name] = cached
        return cached

    def positions_of(self, values: pa.Array | pa.ChunkedArray | Sequence[str]) -> np.ndarray:
        """Each value's row position (int64), -1 where it is not an id of this table."""
        values = ids_array(values)
        if not len(values):
            return np.zeros(0, dtype=np.int64)
        found = pc.index_in(values, value_set=self._columns[self.key])
        return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)

    def list_positions(self, name: str, of: Rows) -> tuple[np.ndarray, np.ndarray]:
        """For a list-of-ids column: (row position, position in `of`) per element, in order;
        elements that are not ids of `of` are -1."""
        column = self._columns[name]
        if not len(column):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        parents = np.asarray(pc.list_parent_indices(column).to_numpy(zero_copy_only=False), dtype=np.int64)
        return parents, of.positions_of(pc.list_flatten(column))


class CsrMap(Mapping):
    """id -> list of ids, as the rows of `keys` each owning a run of positions into `values`.

    Built from (owner position, value position) pairs; a key's values keep the pairs' order.
    A key with no values is absent, as in a dict built by appending."""

    def __init__(self, keys: Rows, owners: np.ndarray, members: np.ndarray, values: Rows):
        owners = np.asarray(owners, dtype=np.int64)
        members = np.asarray(members, dtype=np.int64)
        keep = (owners >= 0) & (members >= 0)
        owners, members = owners[keep], members[keep]
        order = np.argsort(owners, kind="stable")
        self._keys, self._values = keys, values
        self.members = members[order]
        counts = np.bincount(owners, minlength=len(keys.ids)) if len(keys.ids) else np.zeros(0, dtype=np.int64)
        self.indptr = np.zeros(len(keys.ids) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.indptr[1:])
        self._present = np.flatnonzero(counts)

    def positions(self, key) -> np.ndarray:
        """The value positions of `key` (empty when it has none)."""
        i = self._keys.position(key)
        if i is None:
            return self.members[:0]
        return self.members[self.indptr[i]: self.indptr[i + 1]]

    def count(self, key) -> int:
        i = self._keys.position(key)
        return 0 if i is None else int(self.indptr[i + 1] - self.indptr[i])

    def __getitem__(self, key) -> list[str]:
        found = self.positions(key)
        if not len(found):
            raise KeyError(key)
        ids = self._values.ids
        return [ids[j] for j in found.tolist()]

    def get(self, key, default=None):
        found = self.positions(key)
        if not len(found):
            return default
        ids = self._values.ids
        return [ids[j] for j in found.tolist()]

    def __contains__(self, key: object) -> bool:
        return self.count(key) > 0

    def __iter__(self) -> Iterator[str]:
        ids = self._keys.ids
        return (ids[i] for i in self._present.tolist())

    def __len__(self) -> int:
        return len(self._present)


class UnitDomains(Mapping):
    """unit id -> its document's access domain, for every unit (those of deleted documents too).

    The units the store shows answer through their position in `units` (a domain code each);
    the few of deleted documents are kept apart."""

    def __init__(self, units: Rows, codes: np.ndarray, names: list, hidden: dict[str, str | None]):
        self._units, self._codes, self._names, self._hidden = units, codes, names, hidden

    def __getitem__(self, unit_id: str) -> str | None:
        i = self._units.position(unit_id)
        if i is None:
            return self._hidden[unit_id]
        code = int(self._codes[i])
        return None if code < 0 else self._names[code]

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._units or unit_id in self._hidden

    def __iter__(self):
        yield from self._units.ids
        yield from self._hidden

    def __len__(self) -> int:
        return len(self._units) + len(self._hidden)
