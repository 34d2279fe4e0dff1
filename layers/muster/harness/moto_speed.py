"""moto's TransactWriteItems without a copy of the whole table per transaction.

moto backs up every table a transaction touches with `copy.deepcopy` before it
applies the transaction (to roll back a cancelled one): a cost in the table's
size, paid by every transaction. With a gang of thousands of pod items, or a
cluster of 10,000 workloads, that copy is nearly all of the rig's wall time.
`item_backups()` keeps moto's own transaction code and its answers as they are,
and only changes what it backs up: the items the transaction names (each one
deep-copied, or noted absent), restored when the transaction fails. The
outcome of every request is the same; only the wall time changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
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
