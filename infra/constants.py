"""Names, construct ids, context keys and output keys of the Muster CDK app.

The stack, its constructs and the infrastructure tests all import these, so a
rename happens in one place. The names the runtime shares (environment
variables, stack outputs, metrics, event sources) come from `muster.contract`,
the one pure module of the runtime's that infra imports besides the settings
parser, and are available here under the same names; the optional tuner's come
from `muster.aws.tune_map` (standard library only at import).
"""

from __future__ import annotations

from muster import contract
from muster.aws import tune_map
from muster.contract import *  # noqa: F403 - the shared names, as c.ENV_TABLE_NAME etc.

# The optional tuner's names, kept out of the contract (and so of the control plane's layer).
ENV_TUNER_BUCKET = tune_map.ENV_TUNER_BUCKET
OUT_TUNER_BUCKET_NAME = tune_map.OUT_TUNER_BUCKET_NAME
OUT_TUNER_STATE_MACHINE_ARN = tune_map.OUT_TUNER_STATE_MACHINE_ARN

# ---------------------------------------------------------------- context keys (cdk.json)
CTX_STACK_NAME = "muster:stackName"
CTX_CLUSTER_NAME = "muster:clusterName"
CTX_SETTINGS = "muster:settings"
CTX_ALARM_EMAIL = "muster:alarmEmail"
CTX_ALARM_TOPIC_ARN = "muster:alarmTopicArn"
CTX_ALARM_THRESHOLDS = "muster:alarmThresholds"
CTX_LOG_RETENTION_DAYS = "muster:logRetentionDays"
CTX_REMOVAL_POLICY = "muster:removalPolicy"
CTX_CREATE_EKS_ACCESS = "muster:createEksAccessEntries"
CTX_AGENT_NAMESPACE = "muster:agentNamespace"
CTX_AGENT_SERVICE_ACCOUNT = "muster:agentServiceAccount"
CTX_HISTORY_TTL_DAYS = "muster:historyTtlDays"
CTX_LOG_LEVEL = "muster:logLevel"
CTX_SWEEP_MINUTES = "muster:sweepMinutes"
# Optional: `muster tune --on aws`'s distributed map (infra/tuner.py).
CTX_TUNER = "muster:tuner"
CTX_TUNER_CONCURRENCY = "muster:tunerConcurrency"
# Optional: the functions in the cluster's VPC (infra/network.py).
CTX_VPC_ID = "muster:vpcId"
CTX_SUBNET_IDS = "muster:subnetIds"
CTX_SECURITY_GROUP_IDS = "muster:securityGroupIds"
CTX_ROUTE_TABLE_IDS = "muster:routeTableIds"
CTX_VPC_ENDPOINTS = "muster:vpcEndpoints"

# ---------------------------------------------------------------- construct ids
ID_EVENTS = "Events"
ID_BUS = "Bus"
ID_AGENT_RULE = "AgentEventsToIngest"
ID_QUEUES = "Queues"
ID_TABLE = "State"
ID_TIMERS = "Timers"
ID_STATE_MACHINE = "TimerStateMachine"
ID_LAYER = "MusterLayer"
ID_FUNCTIONS = "Functions"
ID_MONITORING = "Monitoring"
ID_SECURITY = "Security"
ID_AGENT_ROLE = "AgentRole"
ID_EKS_ACCESS = "EksAccess"
ID_AGENT_IMAGES = "AgentImages"
ID_NETWORK = "Network"
ID_TUNER = "Tuner"

# The three control-plane functions, their queue and the folder of their code.
INGEST = "ingest"
TIMER = "timer"
ADMISSION = "admission"
FUNCTION_NAMES = (INGEST, TIMER, ADMISSION)
# The admission queue carries requeues (their backoff as the delay) and admission requests.
QUEUE_NAMES = (INGEST, TIMER, ADMISSION)
# Which queue each function consumes.
FUNCTION_QUEUE = {INGEST: INGEST, TIMER: TIMER, ADMISSION: ADMISSION}
# The sweeper consumes no queue: an EventBridge schedule runs it.
SWEEPER = "sweeper"
ID_SWEEP_SCHEDULE = "SweepSchedule"
DEFAULT_SWEEP_MINUTES = 1
HANDLER = "handler.handler"
PYTHON_RUNTIME = "python3.12"
PYTHON_VERSION = "3.12"
LAYER_PLATFORM = "manylinux2014_x86_64"

# The tuner's function: one setting on one seed of a simulation (a week of a trace
# takes seconds to minutes); its map runs at most this many at once by default.
TUNER = "tuner"
TUNER_STATE_MACHINE_SUFFIX = "Tuner"
TUNER_MEMORY_MB = 3008
TUNER_TIMEOUT_MINUTES = 15
DEFAULT_TUNER_CONCURRENCY = 100
TUNER_MAX_CONCURRENCY = 10_000  # Step Functions' own bound on a distributed map's children
TUNER_RUN_DAYS = 30  # a run's files and results are kept this long

# Function timeouts (seconds) and memory (MiB); each queue's visibility timeout is
# VISIBILITY_FACTOR times its consumer's timeout plus its batching window, as AWS
# advises for SQS sources.
FUNCTION_TIMEOUT_SECONDS = {INGEST: 30, TIMER: 30, ADMISSION: 60, SWEEPER: 60}
FUNCTION_MEMORY_MB = {INGEST: 512, TIMER: 256, ADMISSION: 512, SWEEPER: 256}
VISIBILITY_FACTOR = 6
MAX_RECEIVE_COUNT = 5
# Ingest takes up to 100 records, gathered for up to a second: a gang's burst of pod
# events then arrives together, and its pod events in one batch are one write.
BATCH_SIZE = {INGEST: 100, TIMER: 10, ADMISSION: 10}
BATCHING_WINDOW_SECONDS = {INGEST: 1, TIMER: 0, ADMISSION: 0}
# At most this many admission functions poll the admission queue at once, set on the
# event source mapping (MaximumConcurrency) rather than as reserved concurrency, so
# that throttled receives do not count towards the DLQ's maxReceiveCount. AWS's
# minimum is 2: two passes may run at once, and the ledger's conditional writes
# (every admission commits on the ledger's version) keep them from both admitting.
ADMISSION_MAX_CONCURRENCY = 2
DLQ_RETENTION_DAYS = 14

# ---------------------------------------------------------------- event bus
AGENT_EVENT_PATTERN = {"source": [contract.AGENT_SOURCE]}

# ---------------------------------------------------------------- table
PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expiresAt"
GSI1_NAME = "gsi1"
GSI1_PARTITION_KEY = "gsi1pk"
GSI1_SORT_KEY = "gsi1sk"

# ---------------------------------------------------------------- timer state machine
TIMER_STATE_MACHINE_SUFFIX = "ReadinessTimers"
STATE_WAIT = "WaitUntilDeadline"
STATE_SIGNAL = "SignalDeadlineReached"
TIMER_DEADLINE_PATH = "$.deadline"

# ---------------------------------------------------------------- EKS
KUBERNETES_GROUP = "muster-controlplane"
DEFAULT_AGENT_NAMESPACE = "muster-system"
DEFAULT_AGENT_SERVICE_ACCOUNT = "muster-agent"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"

# ---------------------------------------------------------------- metrics
# Eviction (reason, cause) pairs counted by the eviction alarm: the readiness
# timeouts, which are what a bad timeout or a starved cluster produces.
TIMEOUT_EVICTIONS = (("PodsReadyTimeout", "WaitForStart"), ("PodsReadyTimeout", "WaitForRecovery"))

# ---------------------------------------------------------------- stack outputs
OUT_FUNCTION_ROLE_ARNS = {
    INGEST: "IngestFunctionRoleArn",
    TIMER: "TimerFunctionRoleArn",
    ADMISSION: "AdmissionFunctionRoleArn",
}
OUT_FUNCTION_NAMES = {
    INGEST: contract.OUT_INGEST_FUNCTION_NAME,
    TIMER: contract.OUT_TIMER_FUNCTION_NAME,
    ADMISSION: contract.OUT_ADMISSION_FUNCTION_NAME,
}
OUT_QUEUE_URLS = {
    INGEST: contract.OUT_INGEST_QUEUE_URL,
    TIMER: contract.OUT_TIMER_QUEUE_URL,
    ADMISSION: contract.OUT_ADMISSION_QUEUE_URL,
}
