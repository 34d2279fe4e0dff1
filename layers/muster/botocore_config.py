"""botocore's retry mode, set explicitly for every client, in one place.

The functions' clients (DynamoDB, SQS, Step Functions, EventBridge, EKS) and the
commands' use botocore's `standard` mode with 3 tries: throttling and transient
errors are retried there, with botocore's backoff, and no loop of ours retries
them again (the control plane's conflict loop retries a lost race, which botocore
does not). The agent's EventBridge client makes one try: its sender retries the
entries that failed itself, with backoff, so botocore's retries would nest under it.
"""

from __future__ import annotations

from botocore.config import Config

BOTOCORE_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 3})
"""Where botocore's retries are wanted: every call that no loop of ours retries."""

ONE_TRY = Config(retries={"mode": "standard", "total_max_attempts": 1})
"""Where a loop of ours retries (the agent's sender): botocore must not retry beneath it."""
