"""The DynamoDB store: one table, conditional writes, pods as items of their own.

Layout (partition key `pk`, sort key `sk`; index `gsi1` on `gsi1pk`/`gsi1sk`):

| item | pk | sk | gsi1pk / gsi1sk |
|---|---|---|---|
| workload state | `WL#<ns/name>` | `STATE` | `PHASE#<phase>` / `<ns/name>` (queue index) |
| pod (or a listing's stub) | `WL#<ns/name>` | `POD#<pod>` | `NODE#<node>` / `<ns/name>#<pod>` (node index, live pods only) |
| history entry | `WL#<ns/name>` | `HIST#<version>#<index>` | none; TTL `expiresAt` |
| admission ledger | `ADMISSION` | `LEDGER` | none |
| recent admission | `ADMISSION` | `RECENT#<ns/name>` | none |
| quarantine index | `QUARANTINE` | `WL#<ns/name>` | none |
| settings record | `SETTINGS` | `CLUSTER#<cluster>` | none |
| cluster snapshot part | `SNAPSHOT#<scope>` | `PART#<id>#<part>` | none; TTL `expiresAt` |
| last snapshot acted on | `SNAPSHOT#<scope>` | `APPLIED` | none |
| node capacity (`capacityCheck`) | `NODES` | `NODE#<node>` | none; a deleted node's: TTL `expiresAt` |
| pod expiry left to finish | `EXPIRING` | `WL#<ns/name>` | none |

The workload item carries `version` (every write is conditional on it), `epoch`
(bumped by an eviction; pods written under an older epoch are retired),
`readyCount` (changed only by deltas, in the same transaction as the pod write
that causes them), `state` and `outbox` (JSON). Its size does not grow with the
gang: `state` holds no pods and, of the last pod listing, only its revision (the
listing's uids are stamps on the pod items where they say something the item does
not: `listedRev`, `listedUid`; `muster.runtime.listing`), and an eviction's outbox
names at most 20 not-ready pods. A pod item carries `rev` (its
writes are conditional on it) and `owner`, the uid of the workload object it
belongs to: a new object under the same key (a new incarnation) never sees the
pods of an earlier one. A finished workload's items expire (`expiresAt`, the
table's TTL attribute) and its pods leave the node index: the write that ends an
incarnation records `expiring` (and an `EXPIRING` index item), the pods are set to
expire in transactions of 100, and the record goes when none is left; whoever
next loads the workload, or the sweeper, finishes what a crash left. A deleted
pod leaves a tombstone that expires after `tombstone_ttl_hours`.

One module per kind of item (`table` holds the keys and the paged Query they
share); `DynamoStore` is all of them on one table.
"""

from muster.aws.dynamo.store import DynamoStore

__all__ = ["DynamoStore"]
