"""Assertions on the synthesized template: what a platform team relies on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from infra import constants as c
from tests.infra.conftest import Synthesized, layer_python, resources

pytestmark = pytest.mark.slow


def _ref_id(value: Any) -> str:
    """Logical id of a Ref / Fn::GetAtt."""
    if "Ref" in value:
        return str(value["Ref"])
    return str(value["Fn::GetAtt"][0])


def _queues(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    queues = resources(doc, "AWS::SQS::Queue")
    main = {k: v for k, v in queues.items() if "RedrivePolicy" in v["Properties"]}
    dlqs = {k: v for k, v in queues.items() if k not in main}
    return main, dlqs


def _render(value: Any) -> str:
    """A Fn::Join'ed string with its tokens shown as <Ref>."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_render(p) for p in parts)
    if "Ref" in value:
        return f"<{value['Ref']}>"
    if "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    return "<token>"


def test_every_queue_has_its_own_dlq_encryption_and_tls(synthesized: Synthesized) -> None:
    main, dlqs = _queues(synthesized.template)
    # THEN three work queues, three DLQs, one DLQ each
    assert len(main) == 3 and len(dlqs) == 3
    targets = {
        _ref_id(q["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]) for q in main.values()
    }
    assert targets == set(dlqs)
    for queue in main.values():
        assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == c.MAX_RECEIVE_COUNT
    for queue in (*main.values(), *dlqs.values()):
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
    policies = resources(synthesized.template, "AWS::SQS::QueuePolicy")
    tls_only = {
        _ref_id(q)
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny"
        and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for q in p["Properties"]["Queues"]
    }
    assert tls_only == set(main) | set(dlqs)


def test_every_queue_and_dlq_has_an_alarm(synthesized: Synthesized) -> None:
    main, dlqs = _queues(synthesized.template)
    alarmed = set()
    for alarm in resources(synthesized.template, "AWS::CloudWatch::Alarm").values():
        for dim in alarm["Properties"].get("Dimensions", []):
            if dim["Name"] == "QueueName":
                alarmed.add(_ref_id(dim["Value"]))
    assert alarmed == set(main) | set(dlqs)


def test_visibility_timeout_is_six_times_the_consumer_timeout_plus_its_window(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    functions = resources(doc, "AWS::Lambda::Function")
    for mapping in resources(doc, "AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        queue = doc["Resources"][_ref_id(props["EventSourceArn"])]
        function = functions[_ref_id(props["FunctionName"])]
        window = props.get("MaximumBatchingWindowInSeconds", 0)
        assert queue["Properties"]["VisibilityTimeout"] >= (
            6 * function["Properties"]["Timeout"] + window
        )
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_ingest_takes_large_batches_gathered_for_a_second(synthesized: Synthesized) -> None:
    """A gang's burst of pod events arrives together, so its pod events share writes."""
    mappings = resources(synthesized.template, "AWS::Lambda::EventSourceMapping").values()
    by_queue = {_ref_id(m["Properties"]["EventSourceArn"]): m["Properties"] for m in mappings}
    [ingest] = [p for q, p in by_queue.items() if "IngestQueue" in q]
    assert ingest["BatchSize"] == 100
    assert ingest["MaximumBatchingWindowInSeconds"] == 1
    others = [p for q, p in by_queue.items() if "IngestQueue" not in q]
    assert len(others) == 2
    assert all(p["BatchSize"] == 10 and "MaximumBatchingWindowInSeconds" not in p for p in others)


def test_each_function_has_its_own_role_layer_and_the_runtime_environment(
    synthesized: Synthesized,
) -> None:
    functions = resources(synthesized.template, "AWS::Lambda::Function")
    assert len(functions) == 4  # three queue consumers and the sweeper
    roles = {_ref_id(f["Properties"]["Role"]) for f in functions.values()}
    assert len(roles) == 4
    slicing = []  # the functions told the ingest queue's URL (reconciliation slices)
    for logical_id, function in functions.items():
        props = function["Properties"]
        assert props["Runtime"] == c.PYTHON_RUNTIME
        assert props["Handler"] == c.HANDLER
        assert props["Architectures"] == ["x86_64"]
        assert len(props["Layers"]) == 1
        env = props["Environment"]["Variables"]
        if c.ENV_INGEST_QUEUE_URL in env:
            slicing.append(logical_id)
        assert set(env) | {c.ENV_INGEST_QUEUE_URL} == set(c.FUNCTION_ENVIRONMENT_KEYS)
        assert env[c.ENV_CLUSTER_NAME] == "training"
        assert env[c.ENV_POWERTOOLS_SERVICE_NAME] == "muster"
        assert env[c.ENV_POWERTOOLS_METRICS_NAMESPACE] == "Muster"
        assert env[c.ENV_HISTORY_TTL_DAYS] == "30"
        assert json.loads(env[c.ENV_SETTINGS]) == synthesized.context["muster:settings"]
    assert len(slicing) == 1 and slicing[0].startswith("FunctionsIngest"), slicing


def test_admission_concurrency_is_limited_on_the_event_source_not_reserved(
    synthesized: Synthesized,
) -> None:
    # Reserved concurrency on an SQS source makes throttled receives count towards
    # maxReceiveCount (messages reach the DLQ under load); the mapping's
    # MaximumConcurrency does not. AWS's minimum is 2; the ledger's conditional
    # writes keep two concurrent passes from both admitting.
    doc = synthesized.template
    functions = resources(doc, "AWS::Lambda::Function")
    mappings = resources(doc, "AWS::Lambda::EventSourceMapping").values()
    admission = [
        m for m in mappings if "AdmissionQueue" in _ref_id(m["Properties"]["EventSourceArn"])
    ]
    assert len(admission) == 1
    assert admission[0]["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 2}
    assert all("ReservedConcurrentExecutions" not in f["Properties"] for f in functions.values())
    others = [m for m in mappings if m is not admission[0]]
    assert all("ScalingConfig" not in m["Properties"] for m in others)


def test_the_sweeper_runs_every_minute_and_only_reads_expires_and_sends(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    rules = [
        r["Properties"]
        for r in resources(doc, "AWS::Events::Rule").values()
        if "ScheduleExpression" in r["Properties"]
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(1 minute)"]
    (target,) = rules[0]["Targets"]
    functions = resources(doc, "AWS::Lambda::Function")
    sweeper = functions[_ref_id(target["Arn"])]
    assert "sweeper" in sweeper["Properties"]["Description"]
    role = _ref_id(sweeper["Properties"]["Role"])
    actions: set[str] = set()
    for policy in resources(doc, "AWS::IAM::Policy").values():
        if role in {_ref_id(r) for r in policy["Properties"]["Roles"]}:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                action = statement["Action"]
                actions |= set(action if isinstance(action, list) else [action])
    assert not [a for a in actions if a.startswith(("states:", "events:", "eks:"))]
    # It writes only to carry on a finished gang's pod expiry (UpdateItem, and DeleteItem
    # of its record): never a new item (tests/infra/test_least_privilege.py lists its calls).
    assert not [a for a in actions if a in ("dynamodb:PutItem", "dynamodb:BatchWriteItem")]
    assert "sqs:SendMessage" in actions


def test_function_roles_name_their_resources(synthesized: Synthesized) -> None:
    doc = synthesized.template
    function_roles = {
        _ref_id(f["Properties"]["Role"]) for f in resources(doc, "AWS::Lambda::Function").values()
    }
    for policy in resources(doc, "AWS::IAM::Policy").values():
        if not {_ref_id(r) for r in policy["Properties"]["Roles"]} & function_roles:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = (
                statement["Action"]
                if isinstance(statement["Action"], list)
                else [statement["Action"]]
            )
            if statement["Resource"] == "*":
                # THEN only actions without resource-level permissions get '*'
                assert all(a.startswith("xray:") for a in actions), actions
            if "eks:DescribeCluster" in actions:
                assert _render(statement["Resource"]).endswith(":cluster/training")
            if "states:StopExecution" in actions:
                assert _render(statement["Resource"]).endswith(
                    ":execution:Muster-ReadinessTimers:*"
                )


def test_the_agent_role_may_only_put_events_on_the_bus(
    synthesized: Synthesized, template: Any
) -> None:
    doc = synthesized.template
    agent_roles = {
        k: r
        for k, r in resources(doc, "AWS::IAM::Role").items()
        if any(
            s["Principal"].get("Service") == c.POD_IDENTITY_PRINCIPAL
            for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        )
    }
    assert len(agent_roles) == 1
    (agent_id, agent) = next(iter(agent_roles.items()))
    trusted = {
        a
        for s in agent["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert trusted == {"sts:AssumeRole", "sts:TagSession"}
    statements = [
        s
        for p in resources(doc, "AWS::IAM::Policy").values()
        if agent_id in {_ref_id(r) for r in p["Properties"]["Roles"]}
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    bus_id = next(iter(resources(doc, "AWS::Events::EventBus")))
    assert statements == [
        {
            "Action": "events:PutEvents",
            "Condition": {"StringEquals": {"events:source": c.AGENT_SOURCE}},
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [bus_id, "Arn"]},
            "Sid": "PutAgentObservations",
        }
    ]
    template.has_output(c.OUT_AGENT_ROLE_ARN, {"Value": {"Fn::GetAtt": [agent_id, "Arn"]}})


def test_the_bus_accepts_events_only_from_muster_roles(synthesized: Synthesized) -> None:
    doc = synthesized.template
    statements = {
        p["Properties"]["StatementId"].removeprefix("cdk-"): p["Properties"]["Statement"]
        for p in resources(doc, "AWS::Events::EventBusPolicy").values()
    }
    assert set(statements) == {
        "MusterAgentPutEvents",
        "OnlyMusterPutEvents",
        "AgentPutsOnlyAgentSource",
        "ControlPlanePutsOnlyItsSource",
    }
    deny = statements["OnlyMusterPutEvents"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    allowed = {_ref_id(a) for a in deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]}
    function_roles = {
        _ref_id(f["Properties"]["Role"])
        for f in resources(doc, "AWS::Lambda::Function").values()
        if "sweeper" not in f["Properties"]["Description"]  # it publishes nothing
    }
    allow = statements["MusterAgentPutEvents"]
    agent = _ref_id(allow["Principal"]["AWS"])
    assert allowed == function_roles | {agent}


def test_agent_events_are_routed_to_the_ingest_queue(
    synthesized: Synthesized, template: Any
) -> None:
    doc = synthesized.template
    rules = {
        k: r
        for k, r in resources(doc, "AWS::Events::Rule").items()
        if "EventPattern" in r["Properties"]
    }
    assert len(rules) == 1
    rule = next(iter(rules.values()))["Properties"]
    assert rule["EventPattern"] == c.AGENT_EVENT_PATTERN
    (target,) = rule["Targets"]
    assert "Ingest" in _ref_id(target["Arn"])
    assert "Ingest" in _ref_id(target["DeadLetterConfig"]["Arn"])


def test_the_table_matches_what_the_runtime_expects(template: Any) -> None:
    template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "TimeToLiveSpecification": {"AttributeName": "expiresAt", "Enabled": True},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "GlobalSecondaryIndexes": [
                {
                    "IndexName": "gsi1",
                    "KeySchema": [
                        {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                        {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        },
    )
    template.has_resource("AWS::DynamoDB::Table", {"DeletionPolicy": "Retain"})


def test_the_timer_waits_until_the_deadline_then_signals_the_timer_queue(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    (machine,) = resources(doc, "AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props["StateMachineType"] == "STANDARD"
    assert props["StateMachineName"] == "Muster-ReadinessTimers"
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["TracingConfiguration"] == {"Enabled": True}
    definition = json.loads(_render(props["DefinitionString"]))
    assert definition["StartAt"] == c.STATE_WAIT
    wait = definition["States"][c.STATE_WAIT]
    assert wait == {
        "Type": "Wait",
        "TimestampPath": "$.deadline",
        "Next": c.STATE_SIGNAL,
        "Comment": wait["Comment"],
    }
    signal = definition["States"][c.STATE_SIGNAL]
    assert signal["Type"] == "Task"
    assert signal["Resource"].endswith(":states:::sqs:sendMessage")
    assert signal["Parameters"]["MessageBody.$"] == "$"
    assert "Timer" in signal["Parameters"]["QueueUrl"]
    assert signal["End"] is True
    assert set(definition["States"]) == {c.STATE_WAIT, c.STATE_SIGNAL}


def test_alarms_cover_each_failure_mode_and_notify_the_topic(
    synthesized: Synthesized, template: Any
) -> None:
    alarms = resources(synthesized.template, "AWS::CloudWatch::Alarm")
    names = {a["Properties"]["AlarmName"] for a in alarms.values()}
    expected = {
        f"Muster-{q.capitalize()}{kind}"
        for q in c.QUEUE_NAMES
        for kind in ("DeadLetters", "QueueBehind")
    }
    expected |= {
        f"Muster-{f.capitalize()}{kind}"
        for f in (*c.FUNCTION_NAMES, c.SWEEPER)
        for kind in ("Errors", "Throttles")
    }
    expected |= {
        "Muster-WorkloadsQuarantined",
        "Muster-TimerExecutionsFailed",
        "Muster-TimerExecutionsTimedOut",
        "Muster-EvictionsHigh",
        "Muster-DeactivationsHigh",
    }
    assert names == expected
    (topic_id,) = resources(synthesized.template, "AWS::SNS::Topic")
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    evictions = next(
        a for a in alarms.values() if a["Properties"]["AlarmName"] == "Muster-EvictionsHigh"
    )
    used = [
        q["MetricStat"]["Metric"] for q in evictions["Properties"]["Metrics"] if "MetricStat" in q
    ]
    assert {m["Namespace"] for m in used} == {"Muster"}
    assert {tuple(sorted((d["Name"], d["Value"]) for d in m["Dimensions"])) for m in used} == {
        (("cause", cause), ("reason", reason), ("service", "muster"))
        for reason, cause in c.TIMEOUT_EVICTIONS
    }
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})


def test_the_dashboard_shows_the_lifecycle_metrics(synthesized: Synthesized) -> None:
    (dashboard,) = resources(synthesized.template, "AWS::CloudWatch::Dashboard").values()
    body = _render(dashboard["Properties"]["DashboardBody"])
    for metric in (
        c.METRIC_ADMISSIONS,
        c.METRIC_PODS_READY,
        c.METRIC_ADMITTED_TO_READY,
        c.METRIC_EVICTIONS,
        c.METRIC_REQUEUES,
    ):
        assert metric in body
    assert "ApproximateNumberOfMessagesVisible" in body


def test_eks_access_entries_bind_each_function_role_to_the_controlplane_group(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    entries = resources(doc, "AWS::EKS::AccessEntry").values()
    function_roles = {
        _ref_id(f["Properties"]["Role"])
        for f in resources(doc, "AWS::Lambda::Function").values()
        if "sweeper" not in f["Properties"]["Description"]  # it never touches the cluster
    }
    assert {_ref_id(e["Properties"]["PrincipalArn"]) for e in entries} == function_roles
    for entry in entries:
        assert entry["Properties"]["KubernetesGroups"] == [c.KUBERNETES_GROUP]
        assert entry["Properties"]["ClusterName"] == "training"
    (association,) = resources(doc, "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["Namespace"] == "muster-system"
    assert association["Properties"]["ServiceAccount"] == "muster-agent"


def test_outputs_name_what_the_agent_and_operators_need(template: Any) -> None:
    outputs = template.find_outputs("*")
    for key in (
        c.OUT_EVENT_BUS_NAME,
        c.OUT_EVENT_BUS_ARN,
        c.OUT_TABLE_NAME,
        c.OUT_TIMER_STATE_MACHINE_ARN,
        c.OUT_AGENT_ROLE_ARN,
        c.OUT_ALARM_TOPIC_ARN,
        *c.OUT_QUEUE_URLS.values(),
        *c.OUT_FUNCTION_ROLE_ARNS.values(),
    ):
        assert key in outputs


def test_the_layer_ships_the_functions_part_of_muster_and_its_dependencies(
    synthesized: Synthesized,
) -> None:
    python = layer_python(synthesized)
    assert (python / "muster" / "core" / "decide.py").is_file()
    assert (python / "urllib3").is_dir() and (python / "yaml").is_dir()
    assert (python / "aws_lambda_powertools").is_dir()
    # boto3 comes from the Lambda runtime; the Kubernetes client is the agent's only
    assert not (python / "boto3").exists() and not (python / "botocore").exists()
    assert not (python / "kubernetes").exists()
    assert not (python / "muster" / "sim").exists() and not (python / "muster" / "local").exists()
