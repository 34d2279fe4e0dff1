"""moto's DynamoDB without two costs in the table's size on every request.

moto answers as DynamoDB does, but two of its habits cost time in the size of the
whole table, which at scale (a gang of thousands of pod items, a cluster of
10,000 workloads and 50,000 pods) is nearly all of the rig's wall time:

- a transaction backs up every table it touches with `copy.deepcopy` (to roll
  back if cancelled): `item_backups()` keeps moto's transaction code and backs
  up only the items the transaction names (each deep-copied, or noted absent),
  restored when it fails;
- a Query first sorts every item of the table (`Table.all_items`), then keeps
  those of the partition (or of the index's key): `partition_queries()` hands
  moto's query code the partition's items alone for a query of the table, and
  the table's items unsorted for a query of an index (moto sorts what matches by
  the index's and the table's keys, so the order never came from that sort).

moto's own code still decides every answer; the answers are the same, only the
wall time changes (tests/scale/test_harness.py compares them). `faster_moto()`
is both.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

Backup = list[tuple[Any, Any, Any, Any]]  # (table, hash value, range value, item or None)


class _TablesKept:
    """Stands in for the `copy` module in moto's DynamoDB models: a table is not copied."""

    def __init__(self, table_type: type) -> None:
        self.table_type = table_type

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if isinstance(value, self.table_type):
            return value  # the rollback then puts the same table back: the items' backup restores
        return copy.deepcopy(value, memo)


@contextmanager
def item_backups() -> Iterator[None]:
    """Inside: moto's transactions back up the items they name, not whole tables."""
    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    backend = models.DynamoDBBackend
    original = backend.transact_write_items

    def backup(self: Any, transact_items: list[dict[str, Any]]) -> Backup:
        kept: Backup = []
        for entry in transact_items:
            for op in entry.values():
                table = self.tables.get(op.get("TableName"))
                if table is None:
                    continue
                key = op.get("Key") or op.get("Item") or {}
                if table.hash_key_attr not in key:
                    continue
                hash_value = DynamoType(key[table.hash_key_attr])
                range_value = None
                if table.range_key_attr is not None:
                    if table.range_key_attr not in key:
                        continue
                    range_value = DynamoType(key[table.range_key_attr])
                item = table.get_item(hash_value, range_value)
                kept.append((table, hash_value, range_value, copy.deepcopy(item)))
        return kept

    def restore(kept: Backup) -> None:
        for table, hash_value, range_value, item in reversed(kept):
            if range_value is None:
                if item is None:
                    table.items.pop(hash_value, None)
                else:
                    table.items[hash_value] = item
            elif item is None:
                table.items[hash_value].pop(range_value, None)
            else:
                table.items[hash_value][range_value] = item

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        kept = backup(self, transact_items)
        try:
            original(self, transact_items)
        except BaseException:
            restore(kept)
            raise

    module_copy = models.copy
    models.copy = _TablesKept(Table)  # type: ignore[assignment]
    backend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    try:
        yield
    finally:
        backend.transact_write_items = original  # type: ignore[method-assign]
        models.copy = module_copy


@contextmanager
def partition_queries() -> Iterator[None]:
    """Inside: moto's Query reads the partition's items, not the sorted table."""
    from moto.dynamodb.models.table import Table

    original = Table.query

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if not self.range_key_attr or (index_name is None and hash_key is None):
            return original(self, hash_key, *args, **kwargs)  # moto's own way
        if index_name is None:
            partition = self.items.get(hash_key) or {}
            items = list(partition.values())
        else:
            items = [i for p in self.items.values() for i in p.values()]
        self.all_items = lambda: items  # read by moto's query code only, and removed
        try:
            return original(self, hash_key, *args, **kwargs)
        finally:
            del self.all_items

    Table.query = query  # type: ignore[method-assign]
    try:
        yield
    finally:
        Table.query = original  # type: ignore[method-assign]


@contextmanager
def faster_moto() -> Iterator[None]:
    """`item_backups()` and `partition_queries()` together."""
    with ExitStack() as stack:
        stack.enter_context(item_backups())
        stack.enter_context(partition_queries())
        yield
