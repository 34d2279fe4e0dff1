"""DynamoDB's limits, modelled on the real boto3 client (against moto), in virtual time.

moto answers every request it is sent; DynamoDB does not. These hooks, put on a
client with `DynamoLimits.attach`, make the client behave as DynamoDB would at
scale and count what it would bill:

- item sizes by DynamoDB's rules (`item_size`): a write that would make an item
  exceed 400 KB is refused with a `ValidationException` ("Item size has exceeded
  the maximum allowed size"), before the call for a Put, by moto for an Update
  (moto refuses at about 405,000 bytes, a little below 400 KB);
- units: a write costs ceil(size / 1 KB) write units per item (the larger of the
  item before and after), twice inside `TransactWriteItems`; a read costs
  ceil(size / 4 KB) read units, half for an eventually consistent read, twice
  inside a transaction; a Query is charged by its page's summed size, a
  BatchGetItem per item;
- hot items: each item's units per second of virtual time; a request that would
  take one item past 1,000 write units or 3,000 read units in one second is
  throttled (`ProvisionedThroughputExceededException`, or a `TransactionCanceledException`
  with reason `ThrottlingError` for a transaction), after botocore's standard
  retries (3 tries, backing off in virtual time);
- transaction conflicts: every write occupies its modelled latency window on the
  items it touches; a transaction that touches an item another caller's write
  holds is cancelled (`TransactionCanceledException`, reason `TransactionConflict`),
  and a single-item write to an item another caller's transaction holds fails
  with `TransactionConflictException`, as DynamoDB does.

Time and who is calling come from a `Timeline` (the harness's Lambda workers,
`muster.harness.budget.Workers`, or `ManualTimeline` in tests); each call spends
`DYNAMO_LATENCY` seconds of its caller's time.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from botocore.exceptions import ClientError

MAX_ITEM_BYTES = 400 * 1024
WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096
ITEM_WCU_PER_SECOND = 1000
ITEM_RCU_PER_SECOND = 3000
DYNAMO_LATENCY = 0.004
TRIES = 3  # botocore's standard mode (muster.botocore_config)
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})

Key = tuple[str, str]  # (pk, sk)


class Timeline(Protocol):
    """Who is calling, and when: `spend` takes `seconds` of the caller's virtual time."""

    def spend(self, seconds: float, what: str) -> tuple[str, float]:
        """(the caller, when its call starts); may raise when the caller's budget ends."""
        ...


@dataclass
class ManualTimeline:
    """A caller and a time set by hand (tests): `spend` does not move them."""

    who: str = "caller"
    now: float = 0.0

    def spend(self, seconds: float, what: str) -> tuple[str, float]:
        return self.who, self.now


# ---------------------------------------------------------------------------- sizes


def number_size(text: str) -> int:
    """A number: about one byte per two significant digits, plus one (and one for a sign)."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        return len(text.encode())
    digits = value.normalize().as_tuple().digits if value else (0,)
    return (len(digits) + 1) // 2 + 1 + (1 if value < 0 else 0)


def value_size(value: dict[str, Any]) -> int:
    """The size of one attribute value (low-level form, {"S": ...} etc.)."""
    ((kind, body),) = value.items()
    match kind:
        case "S":
            return len(str(body).encode())
        case "N":
            return number_size(str(body))
        case "B":
            return len(body) if isinstance(body, bytes | bytearray) else len(str(body).encode())
        case "BOOL" | "NULL":
            return 1
        case "SS":
            return sum(len(str(s).encode()) for s in body)
        case "NS":
            return sum(number_size(str(n)) for n in body)
        case "BS":
            return sum(len(b) for b in body)
        case "L":
            return 3 + sum(1 + value_size(v) for v in body)
        case "M":
            return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in body.items())
    return len(json.dumps(body).encode())


def item_size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules: its attribute names' and values' bytes."""
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


def write_units(size: int) -> int:
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, *, consistent: bool) -> float:
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def item_key(item: dict[str, Any]) -> Key:
    return (str(item.get("pk", {}).get("S", "")), str(item.get("sk", {}).get("S", "")))


# ---------------------------------------------------------------------------- accounts


@dataclass
class Usage:
    """What the table was asked for, and what it would have billed and refused."""

    requests: Counter[str] = field(default_factory=Counter)
    write_units: float = 0.0
    read_units: float = 0.0
    throttled: int = 0  # requests (each try) refused for a hot item
    conflicts: int = 0  # requests refused for a transaction in flight on an item
    too_large: int = 0
    largest: int = 0
    largest_key: Key = ("", "")

    @property
    def writes(self) -> int:
        return sum(n for op, n in self.requests.items() if op in WRITES)

    @property
    def reads(self) -> int:
        return sum(n for op, n in self.requests.items() if op in READS)


@dataclass
class _Window:
    who: str
    start: float
    end: float
    transaction: bool


class DynamoLimits:
    """The table's limits and accounts; `attach` puts them on a DynamoDB client."""

    def __init__(
        self, timeline: Timeline, raw: Any, table: str, *, latency: float = DYNAMO_LATENCY
    ) -> None:
        self.timeline = timeline
        self.raw = raw  # an unhooked client: reads the size of an item after an update
        self.table = table
        self.latency = latency
        self.usage = Usage()
        self.sizes: dict[Key, int] = {}
        self.wcu: defaultdict[tuple[Key, int], float] = defaultdict(float)
        self.rcu: defaultdict[tuple[Key, int], float] = defaultdict(float)
        self.partition_wcu: defaultdict[tuple[str, int], float] = defaultdict(float)
        self.windows: defaultdict[Key, list[_Window]] = defaultdict(list)
        self.on_request: Callable[[str], None] | None = None  # told each request's operation

    def attach(self, client: Any) -> Any:
        client.meta.events.register(
            "before-parameter-build.dynamodb.*", self._before, unique_id=f"limits-b-{id(self)}"
        )
        client.meta.events.register(
            "after-call.dynamodb.*", self._after, unique_id=f"limits-a-{id(self)}"
        )
        self._client = client
        return client

    def reset(self) -> None:
        """Counts from now on (sizes and per-second accounts are kept)."""
        self.usage = Usage()

    def hottest_wcu(self) -> float:
        return max(self.wcu.values(), default=0.0)

    def hottest_partition_wcu(self) -> float:
        return max(self.partition_wcu.values(), default=0.0)

    # ------------------------------------------------------------------ before a call

    def _before(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        op = model.name
        self.usage.requests[op] += 1
        context["limits_params"] = params
        if self.on_request is not None:
            self.on_request(op)
        for attempt in range(TRIES):
            who, start = self.timeline.spend(self.latency, f"dynamodb.{op}")
            context["limits"] = (who, start)
            try:
                self._check(op, params, who, start)
                return
            except ClientError as exc:
                code = exc.response["Error"]["Code"]
                throttled = code == "ProvisionedThroughputExceededException" or (
                    "ThrottlingError" in str(exc.response.get("CancellationReasons"))
                )
                if not throttled or attempt == TRIES - 1:
                    raise
                # botocore's standard mode backs off (in the caller's virtual time).
                self.timeline.spend(0.5 * 2**attempt, "dynamodb.backoff")

    def _check(self, op: str, params: dict[str, Any], who: str, start: float) -> None:
        writes = self._written(op, params)
        end = start + self.latency
        for _key, item in writes:
            if item is not None and item_size(item) > MAX_ITEM_BYTES:
                self.usage.too_large += 1
                raise self._error(
                    "ValidationException", "Item size has exceeded the maximum allowed size", op
                )
        transaction = op == "TransactWriteItems"
        if writes:
            self._conflicts(op, [k for k, _ in writes], who, start, end, transaction)
        second = int(start)
        hot = [
            key
            for key, item in writes
            if self.wcu[(key, second)] + self._estimate(key, item, transaction)
            > ITEM_WCU_PER_SECOND
        ]
        hot += [
            key
            for key in self._read_keys(op, params)
            if self.rcu[(key, second)] + 1 > ITEM_RCU_PER_SECOND
        ]
        if hot:
            self.usage.throttled += 1
            if transaction:
                reasons = [
                    {"Code": "ThrottlingError", "Message": "Throughput exceeds the item's limit"}
                    if k in hot
                    else {"Code": "None"}
                    for k, _ in writes
                ]
                raise self._cancelled(reasons, op)
            raise self._error(
                "ProvisionedThroughputExceededException",
                "Throughput exceeds the current capacity of your table or index for the key "
                f"{hot[0][0]}/{hot[0][1]}. Consider spreading the load across keys.",
                op,
            )
        for key in [k for k, _ in writes]:
            self.windows[key].append(_Window(who, start, end, transaction))

    def _conflicts(
        self, op: str, keys: list[Key], who: str, start: float, end: float, transaction: bool
    ) -> None:
        clashing: set[Key] = set()
        for key in keys:
            kept = [w for w in self.windows[key] if w.end > start - 1.0]
            self.windows[key] = kept
            for w in kept:
                overlaps = w.start < end and start < w.end and w.who != who
                if overlaps and (transaction or w.transaction):
                    clashing.add(key)
        if not clashing:
            return
        self.usage.conflicts += 1
        if transaction:
            reasons = [
                {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}
                if k in clashing
                else {"Code": "None"}
                for k in keys
            ]
            raise self._cancelled(reasons, op)
        raise self._error("TransactionConflictException", "Transaction is ongoing for the item", op)

    def _estimate(self, key: Key, item: dict[str, Any] | None, transaction: bool) -> float:
        size = max(self.sizes.get(key, 0), item_size(item) if item is not None else 0)
        return write_units(size) * (2 if transaction else 1)

    # ------------------------------------------------------------------ after a call

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if "Error" in parsed or "limits" not in context:
            return
        op = model.name
        _, start = context["limits"]
        second = int(start)
        params = context.get("limits_params") or {}
        if op in WRITES:
            self._account_writes(op, params, second)
        for key, units in self._read_units(op, parsed, params):
            self.rcu[(key, second)] += units
            self.usage.read_units += units

    def _account_writes(self, op: str, params: dict[str, Any], second: int) -> None:
        transaction = op == "TransactWriteItems"
        for key, item in self._written(op, params):
            before = self.sizes.get(key, 0)
            if item is not None:
                after = item_size(item)
            elif op == "DeleteItem" or self._deletes(op, params, key):
                after = 0
            else:
                after = self._measure(key)
            units = write_units(max(before, after)) * (2 if transaction else 1)
            self.wcu[(key, second)] += units
            self.partition_wcu[(key[0], second)] += units
            self.usage.write_units += units
            self._size(key, after)

    def _size(self, key: Key, size: int) -> None:
        if size:
            self.sizes[key] = size
        else:
            self.sizes.pop(key, None)
        if size > self.usage.largest:
            self.usage.largest, self.usage.largest_key = size, key

    def _measure(self, key: Key) -> int:
        reply = self.raw.get_item(
            TableName=self.table,
            Key={"pk": {"S": key[0]}, "sk": {"S": key[1]}},
            ConsistentRead=True,
        )
        return item_size(reply["Item"]) if "Item" in reply else 0

    # ------------------------------------------------------------------ requests

    @staticmethod
    def _written(op: str, params: dict[str, Any]) -> list[tuple[Key, dict[str, Any] | None]]:
        """The items a write touches: (key, the new item for a Put, else None)."""
        if op == "PutItem":
            return [(item_key(params["Item"]), params["Item"])]
        if op in ("UpdateItem", "DeleteItem"):
            return [(item_key(params["Key"]), None)]
        if op == "TransactWriteItems":
            out: list[tuple[Key, dict[str, Any] | None]] = []
            for entry in params.get("TransactItems", []):
                ((kind, body),) = entry.items()
                if kind == "Put":
                    out.append((item_key(body["Item"]), body["Item"]))
                elif kind in ("Update", "Delete"):
                    out.append((item_key(body["Key"]), None))
            return out
        if op == "BatchWriteItem":
            out = []
            for requests in params.get("RequestItems", {}).values():
                for r in requests:
                    if "PutRequest" in r:
                        out.append((item_key(r["PutRequest"]["Item"]), r["PutRequest"]["Item"]))
                    else:
                        out.append((item_key(r["DeleteRequest"]["Key"]), None))
            return out
        return []

    @staticmethod
    def _deletes(op: str, params: dict[str, Any], key: Key) -> bool:
        if op == "TransactWriteItems":
            return any(
                "Delete" in e and item_key(e["Delete"]["Key"]) == key
                for e in params.get("TransactItems", [])
            )
        if op == "BatchWriteItem":
            return any(
                "DeleteRequest" in r and item_key(r["DeleteRequest"]["Key"]) == key
                for rs in params.get("RequestItems", {}).values()
                for r in rs
            )
        return False

    @staticmethod
    def _read_keys(op: str, params: dict[str, Any]) -> Iterable[Key]:
        if op == "GetItem":
            return [item_key(params["Key"])]
        if op == "BatchGetItem":
            return [item_key(k) for t in params["RequestItems"].values() for k in t["Keys"]]
        return []

    @staticmethod
    def _read_units(
        op: str, parsed: dict[str, Any], params: dict[str, Any]
    ) -> Iterable[tuple[Key, float]]:
        """(item, read units) for what a read returned."""
        consistent = bool(params.get("ConsistentRead"))
        if op == "GetItem":
            item = parsed.get("Item")
            size = item_size(item) if item else 0
            return [(item_key(params["Key"]), read_units(size, consistent=consistent))]
        if op == "BatchGetItem":
            out = []
            for table, items in parsed.get("Responses", {}).items():
                strong = bool(params["RequestItems"][table].get("ConsistentRead"))
                out += [(item_key(i), read_units(item_size(i), consistent=strong)) for i in items]
            return out
        if op in ("Query", "Scan"):
            items = parsed.get("Items", [])
            total = sum(item_size(i) for i in items)
            units = read_units(total, consistent=consistent)
            # The page's units, shared out over its items by size (the per-item account).
            return [
                (item_key(i), units * item_size(i) / total if total else 0.0) for i in items
            ] or [(("", ""), units)]
        if op == "TransactGetItems":
            return [
                (item_key(r["Item"]), 2 * read_units(item_size(r["Item"]), consistent=True))
                for r in parsed.get("Responses", [])
                if r.get("Item")
            ]
        return []

    # ------------------------------------------------------------------ errors

    def _error(self, code: str, message: str, op: str) -> ClientError:
        response: dict[str, Any] = {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        return self._client.exceptions.from_code(code)(response, op)

    def _cancelled(self, reasons: list[dict[str, str]], op: str) -> ClientError:
        listed = ", ".join(r["Code"] for r in reasons)
        response: dict[str, Any] = {
            "Error": {
                "Code": "TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for "
                f"specific reasons [{listed}]",
            },
            "CancellationReasons": reasons,
            "ResponseMetadata": {"HTTPStatusCode": 400},
        }
        error: ClientError = self._client.exceptions.from_code("TransactionCanceledException")(
            response, op
        )
        return error
