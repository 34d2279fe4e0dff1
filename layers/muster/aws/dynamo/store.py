"""`DynamoStore`: the workload store on one table, each kind of item from its own module."""

from __future__ import annotations

from muster.aws.dynamo.capacity import NodeItems
from muster.aws.dynamo.history import HistoryItems
from muster.aws.dynamo.indexes import IndexReads
from muster.aws.dynamo.ledger import AdmissionLedger
from muster.aws.dynamo.quarantine import QuarantineItems
from muster.aws.dynamo.settings import SettingsRecord
from muster.aws.dynamo.snapshots import SnapshotItems


class DynamoStore(
    AdmissionLedger,
    QuarantineItems,
    SnapshotItems,
    NodeItems,
    IndexReads,
    HistoryItems,
    SettingsRecord,
):
    """`WorkloadStore` on one DynamoDB table (the layout: `muster.aws.dynamo`).

    The admission ledger builds on the workload items, and they on the pod items.
    """
