"""The names the deployment and the runtime share, defined once and imported by both.

`infra/` builds the stack with them (the functions' environment, the stack's
outputs, alarms on metrics, rules on event sources); the functions, the agent
and the commands read and write the same names from here, so a rename cannot
leave one side behind. Pure: it imports nothing, so the CDK app can import it.
"""

from __future__ import annotations

SERVICE_NAME = "muster"  # Powertools' service: the logger's name and the metrics' dimension
METRICS_NAMESPACE = "Muster"
DEFAULT_STACK_NAME = "Muster"
LOCAL_STACK_NAME = "MusterLocal"  # the stack `muster local` deploys

# ---------------------------------------------------------------- event sources and types
AGENT_SOURCE = "muster.agent"
CONTROLPLANE_SOURCE = "muster.controlplane"
WORKLOAD_OBSERVED = "Workload Observed"
POD_OBSERVED = "Pod Observed"
NODE_OBSERVED = "Node Observed"
CLUSTER_SNAPSHOT = "Cluster Snapshot"
AGENT_DETAIL_TYPES = (WORKLOAD_OBSERVED, POD_OBSERVED, NODE_OBSERVED, CLUSTER_SNAPSHOT)

# ---------------------------------------------------------------- the functions' environment
ENV_TABLE_NAME = "MUSTER_TABLE_NAME"
ENV_EVENT_BUS_NAME = "MUSTER_EVENT_BUS_NAME"
ENV_ADMISSION_QUEUE_URL = "MUSTER_ADMISSION_QUEUE_URL"
ENV_TIMER_STATE_MACHINE_ARN = "MUSTER_TIMER_STATE_MACHINE_ARN"
ENV_CLUSTER_NAME = "MUSTER_CLUSTER_NAME"
ENV_SETTINGS = "MUSTER_SETTINGS"
ENV_HISTORY_TTL_DAYS = "MUSTER_HISTORY_TTL_DAYS"
ENV_TIMER_QUEUE_URL = "MUSTER_TIMER_QUEUE_URL"
# The ingest queue, where the ingest function sends a snapshot's reconciliation slices.
ENV_INGEST_QUEUE_URL = "MUSTER_INGEST_QUEUE_URL"
ENV_POWERTOOLS_SERVICE_NAME = "POWERTOOLS_SERVICE_NAME"
ENV_POWERTOOLS_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"
ENV_LOG_LEVEL = "LOG_LEVEL"
FUNCTION_ENVIRONMENT_KEYS = (
    ENV_TABLE_NAME,
    ENV_EVENT_BUS_NAME,
    ENV_ADMISSION_QUEUE_URL,
    ENV_TIMER_STATE_MACHINE_ARN,
    ENV_CLUSTER_NAME,
    ENV_SETTINGS,
    ENV_HISTORY_TTL_DAYS,
    ENV_TIMER_QUEUE_URL,
    ENV_INGEST_QUEUE_URL,
    ENV_POWERTOOLS_SERVICE_NAME,
    ENV_POWERTOOLS_METRICS_NAMESPACE,
    ENV_LOG_LEVEL,
)

# ---------------------------------------------------------------- metrics (namespace Muster)
METRIC_ADMISSIONS = "Admissions"
METRIC_EVICTIONS = "Evictions"  # dimensions: reason, cause
METRIC_REQUEUES = "Requeues"
METRIC_DEACTIVATIONS = "Deactivations"
METRIC_PODS_READY = "PodsReady"
METRIC_ADMITTED_TO_READY = "AdmittedToReadySeconds"
METRIC_INVALID_EVENTS = "InvalidEvents"
METRIC_IGNORED_EVENTS = "IgnoredEvents"  # dimension: outcome
METRIC_QUARANTINED = "QuarantinedWorkloads"  # reported by the sweeper every run
METRIC_QUARANTINES = "Quarantines"  # dimension: effect
METRIC_EFFECT_FAILURES = "EffectFailures"  # dimension: effect
METRIC_SWEEPER_RESENT = "SweeperResent"
METRIC_ANNOUNCE_FAILURES = "AnnounceFailures"
METRIC_PLANNING_FAILURES = "PlanningFailures"  # queued workloads the planner could not judge

# ---------------------------------------------------------------- stack outputs
OUT_EVENT_BUS_NAME = "EventBusName"
OUT_EVENT_BUS_ARN = "EventBusArn"
OUT_TABLE_NAME = "TableName"
OUT_INGEST_QUEUE_URL = "IngestQueueUrl"
OUT_TIMER_QUEUE_URL = "TimerQueueUrl"
OUT_ADMISSION_QUEUE_URL = "AdmissionQueueUrl"
OUT_TIMER_STATE_MACHINE_ARN = "TimerStateMachineArn"
OUT_AGENT_ROLE_ARN = "AgentRoleArn"
# What `muster manifests` and `muster agent-image` read to render the cluster side.
OUT_CLUSTER_NAME = "ClusterName"
OUT_AGENT_NAMESPACE = "AgentNamespace"
OUT_AGENT_SERVICE_ACCOUNT = "AgentServiceAccount"
OUT_AGENT_IMAGE_REPOSITORY_URI = "AgentImageRepositoryUri"
OUT_FUNCTIONS_SECURITY_GROUP_ID = "FunctionsSecurityGroupId"
OUT_ALARM_TOPIC_ARN = "AlarmTopicArn"
OUT_DASHBOARD_NAME = "DashboardName"
OUT_SWEEPER_FUNCTION_NAME = "SweeperFunctionName"
OUT_INGEST_FUNCTION_NAME = "IngestFunctionName"  # the commands find the deployment by it
OUT_TIMER_FUNCTION_NAME = "TimerFunctionName"
OUT_ADMISSION_FUNCTION_NAME = "AdmissionFunctionName"
