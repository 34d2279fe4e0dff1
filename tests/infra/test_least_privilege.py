"""The synthesized template grants what the code calls, on Muster's own resources, and
nothing more; the bus takes each source only from its owner; the agent's role can be
assumed only by the agent's service account on this cluster.

The calls are read from the code itself (every `self.client.<operation>(` in
`muster.aws`, and the EKS lookup in `muster.kube.auth`), so a new call without its
grant, or a grant left after its call is gone, fails here.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

import pytest

from infra import constants as c
from tests.infra.conftest import REPO_ROOT, Synthesized, resources

pytestmark = pytest.mark.slow

AWS_ADAPTERS = {
    "dynamo": "dynamodb",  # a package: every module of it
    "sqs.py": "sqs",
    "eventbridge.py": "events",
    "stepfunctions.py": "states",
}
# Actions the platform needs that no line of Muster calls: the function's own logs
# and traces, and the event source mapping that consumes its queue.
PLATFORM = {
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
}
CONSUMER = {
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
}


def _action(service: str, operation: str) -> str:
    return f"{service}:" + "".join(part.capitalize() for part in operation.split("_"))


def calls_in_code() -> set[str]:
    """Every AWS action the control plane's code performs."""
    found: set[str] = set()
    aws = REPO_ROOT / "layers" / "muster" / "aws"
    for name, service in AWS_ADAPTERS.items():
        where = aws / name
        sources = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        text = "\n".join(p.read_text() for p in sources)
        for operation in re.findall(r"self\.client\.(\w+)\(", text):
            if operation == "transact_write_items":
                # A transaction is authorised by the item actions inside it.
                kinds = set(re.findall(r'\{"(Put|Update|Delete|ConditionCheck)"', text))
                found |= {f"dynamodb:{k}Item" for k in kinds}
            else:
                found.add(_action(service, operation))
    auth = (REPO_ROOT / "layers" / "muster" / "kube" / "auth.py").read_text()
    found |= {_action("eks", op) for op in re.findall(r"eks_client\.(\w+)\(", auth)}
    return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _ref(value: Any) -> str:
    if isinstance(value, dict) and "Ref" in value:
        return str(value["Ref"])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    return str(value)


def _statements_of(doc: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    return [
        s
        for p in resources(doc, "AWS::IAM::Policy").values()
        if role_id in {_ref(r) for r in p["Properties"]["Roles"]}
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _function_roles(doc: dict[str, Any]) -> set[str]:
    return {_ref(f["Properties"]["Role"]) for f in resources(doc, "AWS::Lambda::Function").values()}


# The sweeper reads the phase index and the settings record, finishes leftover pod
# expiries (`DynamoStore.expire_leftover_pods`: updates, and the delete of the expiry's
# index item) and sends messages; nothing else.
SWEEPER_CALLS = {
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "sqs:SendMessage",
}


def _sweeper_role(doc: dict[str, Any]) -> str:
    [role] = [
        _ref(f["Properties"]["Role"])
        for f in resources(doc, "AWS::Lambda::Function").values()
        if "sweeper" in f["Properties"]["Description"]
    ]
    return role


def _agent_role(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(role_id, role)] = [
        (k, r)
        for k, r in resources(doc, "AWS::IAM::Role").items()
        if any(
            s["Principal"].get("Service") == c.POD_IDENTITY_PRINCIPAL
            for s in r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        )
    ]
    return role_id, role


def test_the_code_makes_the_calls_this_test_expects() -> None:
    # A guard on the reader above: it must find the calls (and no Scan, no batch write).
    calls = calls_in_code()
    assert {"dynamodb:Query", "dynamodb:UpdateItem", "sqs:SendMessage"} <= calls
    assert {"states:StartExecution", "states:StopExecution", "events:PutEvents"} <= calls
    assert "eks:DescribeCluster" in calls
    assert not calls & {"dynamodb:Scan", "dynamodb:BatchWriteItem", "states:DescribeExecution"}


def test_each_function_role_grants_exactly_the_calls_the_code_makes(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    sweeper = _sweeper_role(doc)
    for role_id in _function_roles(doc):
        calls = SWEEPER_CALLS if role_id == sweeper else calls_in_code()
        granted = {
            a
            for s in _statements_of(doc, role_id)
            if s["Effect"] == "Allow"
            for a in _list(s["Action"])
        }
        unused = granted - calls - PLATFORM - CONSUMER
        assert not unused, f"{role_id} is granted actions nothing calls: {sorted(unused)}"
        missing = calls - granted
        assert not missing, f"{role_id} lacks actions the code calls: {sorted(missing)}"
        for dropped in ("dynamodb:Scan", "dynamodb:BatchWriteItem", "dynamodb:GetRecords"):
            assert dropped not in granted
        assert not granted & {
            "dynamodb:GetShardIterator",
            "dynamodb:DescribeTable",
            "states:DescribeExecution",
        }


def test_function_grants_name_their_own_resources(synthesized: Synthesized) -> None:
    doc = synthesized.template
    [table] = resources(doc, "AWS::DynamoDB::Table")
    [bus] = resources(doc, "AWS::Events::EventBus")
    [machine] = resources(doc, "AWS::StepFunctions::StateMachine")
    for role_id in _function_roles(doc):
        for s in _statements_of(doc, role_id):
            actions = _list(s["Action"])
            targets = {_ref(r) for r in _list(s["Resource"])}
            if any(a.startswith("dynamodb:") for a in actions):
                assert all(table in str(r) for r in _list(s["Resource"])), s
            if "events:PutEvents" in actions:
                assert targets == {bus}
                assert s["Condition"] == {"StringEquals": {"events:source": c.CONTROLPLANE_SOURCE}}
            if "states:StartExecution" in actions:
                assert targets == {machine}
            if "sqs:SendMessage" in actions and s.get("Sid") != "SendReconcileSlices":
                # requeues and admission requests; timer signals re-armed or resent
                assert targets and all(
                    "AdmissionQueue" in q or "TimerQueue" in q for q in targets
                ), s


def _role_of(doc: dict[str, Any], name: str) -> str:
    [role] = [
        _ref(f["Properties"]["Role"])
        for f in resources(doc, "AWS::Lambda::Function").values()
        if f["Properties"]["Description"].startswith(f"Muster {name}:")
    ]
    return role


def test_only_the_ingest_function_sends_to_the_ingest_queue(synthesized: Synthesized) -> None:
    # A snapshot's reconciliation slices go from the ingest function to its own queue.
    doc = synthesized.template
    ingest = _role_of(doc, c.INGEST)
    for role_id in _function_roles(doc):
        sends = {
            _ref(r)
            for s in _statements_of(doc, role_id)
            if "sqs:SendMessage" in _list(s["Action"])
            for r in _list(s["Resource"])
        }
        to_ingest = {q for q in sends if "IngestQueue" in q}
        if role_id == ingest:
            assert len(to_ingest) == 1, sends
        else:
            assert not to_ingest, (role_id, sends)
    [function] = [
        f
        for f in resources(doc, "AWS::Lambda::Function").values()
        if _ref(f["Properties"]["Role"]) == ingest
    ]
    url = function["Properties"]["Environment"]["Variables"][c.ENV_INGEST_QUEUE_URL]
    assert "IngestQueue" in _ref(url)


def test_the_agent_role_puts_only_its_own_source(synthesized: Synthesized) -> None:
    doc = synthesized.template
    role_id, _ = _agent_role(doc)
    [bus] = resources(doc, "AWS::Events::EventBus")
    [statement] = _statements_of(doc, role_id)
    assert statement["Action"] == "events:PutEvents"
    assert _ref(statement["Resource"]) == bus
    assert statement["Condition"] == {"StringEquals": {"events:source": c.AGENT_SOURCE}}


def test_the_agent_role_trusts_only_the_agents_service_account_on_this_cluster(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    _, role = _agent_role(doc)
    statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    actions = {a for s in statements for a in _list(s["Action"])}
    assert actions == {"sts:AssumeRole", "sts:TagSession"}
    for s in statements:
        tags = s["Condition"]["StringEquals"]
        assert tags["aws:RequestTag/kubernetes-namespace"] == c.DEFAULT_AGENT_NAMESPACE
        assert tags["aws:RequestTag/kubernetes-service-account"] == (
            c.DEFAULT_AGENT_SERVICE_ACCOUNT
        )
        cluster = tags["aws:RequestTag/eks-cluster-arn"]
        rendered = "".join(p if isinstance(p, str) else "<>" for p in cluster["Fn::Join"][1])
        assert rendered.endswith(":cluster/training")


def _bus_policy(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        p["Properties"]["StatementId"].removeprefix("cdk-"): p["Properties"]["Statement"]
        for p in resources(doc, "AWS::Events::EventBusPolicy").values()
    }


def _bus_says(statements: dict[str, dict[str, Any]], principal: str, source: str) -> str | None:
    """ "Deny", "Allow" or None: the bus policy on `principal` putting `source` (Deny wins).

    Evaluates only the condition operators the policy uses; principal ARNs are
    compared by the roles' logical ids.
    """
    verdict = None
    for statement in statements.values():
        matches = True
        for operator, pairs in statement.get("Condition", {}).items():
            for key, wanted in pairs.items():
                inside = (principal if key == "aws:PrincipalArn" else source) in {
                    _ref(v) for v in _list(wanted)
                }
                if operator in ("ArnEquals", "StringEquals"):
                    matches = matches and inside
                elif operator in ("ArnNotEquals", "StringNotEquals"):
                    matches = matches and not inside
                else:
                    raise AssertionError(f"unexpected operator {operator}")
        who = statement["Principal"]
        if matches and (who == {"AWS": "*"} or _ref(who["AWS"]) == principal):
            if statement["Effect"] == "Deny":
                return "Deny"
            verdict = "Allow"
    return verdict


def _identity_allows(doc: dict[str, Any], role_id: str, source: str) -> bool:
    for s in _statements_of(doc, role_id):
        if s["Effect"] == "Allow" and "events:PutEvents" in _list(s["Action"]):
            wanted = s.get("Condition", {}).get("StringEquals", {}).get("events:source")
            if wanted is None or source in _list(wanted):
                return True
    return False


def test_the_bus_takes_each_source_only_from_its_owner(synthesized: Synthesized) -> None:
    doc = synthesized.template
    statements = _bus_policy(doc)
    agent, _ = _agent_role(doc)

    def may_put(principal: str, source: str, identity: bool) -> bool:
        bus = _bus_says(statements, principal, source)
        return bus != "Deny" and (bus == "Allow" or identity)

    sweeper = _sweeper_role(doc)
    for source in (c.AGENT_SOURCE, c.CONTROLPLANE_SOURCE):
        assert not may_put(sweeper, source, True)  # it publishes nothing
    for function in _function_roles(doc) - {sweeper}:
        assert may_put(function, c.CONTROLPLANE_SOURCE, True)
        # Even were its own policy widened, the bus refuses the agent's source from it.
        assert not may_put(function, c.AGENT_SOURCE, True)
        assert not _identity_allows(doc, function, c.AGENT_SOURCE)
    assert may_put(agent, c.AGENT_SOURCE, False)
    assert not may_put(agent, c.CONTROLPLANE_SOURCE, True)
    assert not _identity_allows(doc, agent, c.CONTROLPLANE_SOURCE)
    for source in (c.AGENT_SOURCE, c.CONTROLPLANE_SOURCE):
        # Another principal of the account, even with an IAM allow of its own.
        assert not may_put("SomeOtherRole", source, True)


def test_the_bus_allow_for_the_agent_names_its_source(synthesized: Synthesized) -> None:
    statements = _bus_policy(synthesized.template)
    allow = statements["MusterAgentPutEvents"]
    assert allow["Condition"] == {"StringEquals": {"events:source": c.AGENT_SOURCE}}


# --------------------------------------------------------------------------- queues, key, timers

ACCOUNT, REGION = "111122223333", "eu-west-1"


def _concrete(value: Any) -> str:
    """A template value as it resolves in ACCOUNT and REGION (a resource as `<id>`)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(_concrete(p) for p in parts)
    pseudo = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": "aws"}
    if "Ref" in value and value["Ref"] in pseudo:
        return pseudo[value["Ref"]]
    return f"<{_ref(value)}>"


def _grants(statement: dict[str, Any], service: str, action: str, context: dict[str, str]) -> bool:
    """Whether an Allow statement lets `service` do `action` with the request's context.

    Evaluates the operators these policies use; a key the request lacks fails its test.
    """
    if statement["Effect"] != "Allow" or statement["Principal"] != {"Service": service}:
        return False
    if not any(fnmatch.fnmatchcase(action, a) for a in _list(statement["Action"])):
        return False
    for operator, pairs in statement.get("Condition", {}).items():
        for key, wanted in pairs.items():
            values = [_concrete(v) for v in _list(wanted)]
            given = context.get(key)
            if given is None:
                return False
            if operator in ("StringEquals", "ArnEquals"):
                ok = given in values
            elif operator == "ArnLike":
                ok = any(fnmatch.fnmatchcase(given, v) for v in values)
            else:
                raise AssertionError(f"unexpected operator {operator}")
            if not ok:
                return False
    return True


def _mappings(doc: dict[str, Any]) -> dict[str, str]:
    """Function role -> the queue its event source mapping consumes."""
    role_of = {
        k: _ref(f["Properties"]["Role"]) for k, f in resources(doc, "AWS::Lambda::Function").items()
    }
    return {
        role_of[_ref(m["Properties"]["FunctionName"])]: _ref(m["Properties"]["EventSourceArn"])
        for m in resources(doc, "AWS::Lambda::EventSourceMapping").values()
    }


def test_no_function_changes_visibility_or_looks_up_queue_urls() -> None:
    # The Lambdas' code (the layer's package and the handlers); the local mode's
    # poller plays Lambda's part with the developer's own credentials.
    roots = [REPO_ROOT / "functions", *(REPO_ROOT / "layers" / "muster").iterdir()]
    for root in roots:
        if root.name in ("local", "harness", "sim", "cli") or not (
            root.is_dir() or root.suffix == ".py"
        ):
            continue
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            text = path.read_text()
            assert "change_message_visibility" not in text, path
            assert "get_queue_url" not in text, path


def test_each_function_consumes_only_its_own_queue_with_what_the_mapping_needs(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    mappings = _mappings(doc)
    assert len(mappings) == 3
    for role_id in _function_roles(doc):
        granted = {
            a: {_ref(r) for r in _list(s["Resource"])}
            for s in _statements_of(doc, role_id)
            if s["Effect"] == "Allow"
            for a in _list(s["Action"])
        }
        assert "sqs:GetQueueUrl" not in granted and "sqs:ChangeMessageVisibility" not in granted
        for action in CONSUMER:
            if role_id in mappings:
                assert granted[action] == {mappings[role_id]}, (role_id, action)
            else:
                assert action not in granted, (role_id, action)  # the sweeper consumes nothing


def test_eventbridge_may_only_send_the_agent_rules_events_to_the_ingest_queue(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    (rule,) = [
        k
        for k, r in resources(doc, "AWS::Events::Rule").items()
        if "EventPattern" in r["Properties"]
    ]
    ours = {"aws:SourceArn": f"<{rule}>", "aws:SourceAccount": ACCOUNT}
    other = {
        "aws:SourceArn": "arn:aws:events:eu-west-1:111122223333:rule/other",
        "aws:SourceAccount": ACCOUNT,
    }
    sendable = set()
    for policy in resources(doc, "AWS::SQS::QueuePolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        (queue,) = [_ref(q) for q in policy["Properties"]["Queues"]]
        for action in (
            "sqs:SendMessage",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
            "sqs:ReceiveMessage",
        ):
            if any(_grants(s, "events.amazonaws.com", action, ours) for s in statements):
                assert action == "sqs:SendMessage", (queue, action)
                sendable.add(queue)
            assert not any(_grants(s, "events.amazonaws.com", action, other) for s in statements)
    # the ingest queue and its DLQ (for what cannot be delivered), nothing else
    assert len(sendable) == 2 and all("Ingest" in q for q in sendable), sendable


def test_only_this_stacks_alarms_may_use_the_alarm_topics_key(synthesized: Synthesized) -> None:
    doc = synthesized.template
    (key,) = resources(doc, "AWS::KMS::Key").values()
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    names = [
        a["Properties"]["AlarmName"] for a in resources(doc, "AWS::CloudWatch::Alarm").values()
    ]
    assert names

    def may(context: dict[str, str], action: str = "kms:GenerateDataKey") -> bool:
        return any(_grants(s, "cloudwatch.amazonaws.com", action, context) for s in statements)

    for name in names:
        arn = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{name}"
        assert may({"aws:SourceArn": arn, "aws:SourceAccount": ACCOUNT}), name
        assert may({"aws:SourceArn": arn, "aws:SourceAccount": ACCOUNT}, "kms:Decrypt"), name
    elsewhere = f"arn:aws:cloudwatch:{REGION}:444455556666:alarm:Muster-IngestErrors"
    assert not may({"aws:SourceArn": elsewhere, "aws:SourceAccount": "444455556666"})
    another = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:Billing-Spend"
    assert not may({"aws:SourceArn": another, "aws:SourceAccount": ACCOUNT})
    assert not may({})  # no confused deputy without a source
    assert not may({"aws:SourceArn": elsewhere, "aws:SourceAccount": ACCOUNT}, "kms:Encrypt")


def test_the_timer_role_is_assumable_only_for_its_own_state_machine(
    synthesized: Synthesized,
) -> None:
    doc = synthesized.template
    (machine,) = resources(doc, "AWS::StepFunctions::StateMachine").values()
    role_id = _ref(machine["Properties"]["RoleArn"])
    trust = resources(doc, "AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]
    name = machine["Properties"]["StateMachineName"]

    def may(arn: str, account: str = ACCOUNT) -> bool:
        context = {"aws:SourceArn": arn, "aws:SourceAccount": account}
        return any(
            _grants(s, "states.amazonaws.com", "sts:AssumeRole", context)
            for s in trust["Statement"]
        )

    own = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
    assert may(own)
    assert not may(f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:SomeoneElses")
    assert not may(f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}-copy")
    assert not may(own.replace(ACCOUNT, "444455556666"), "444455556666")


def test_what_a_sweep_calls_on_the_table_its_role_grants(synthesized: Synthesized) -> None:
    # GIVEN a finished gang whose pod expiry an invocation left halfway (it timed out)
    from muster.core import Reason, WorkloadFinished
    from muster.harness import Crash
    from muster.runtime.sweeper import sweep

    from tests.aws.conftest import Rig
    from tests.aws.stores import dynamo_store
    from tests.aws.test_expiry import _CrashOnSecondChunk, _running_gang

    with dynamo_store("sweep-rights") as store:
        rig = Rig(store=store)  # type: ignore[arg-type]
        _running_gang(store)
        real = store.client
        store.client = _CrashOnSecondChunk(real)  # type: ignore[assignment]
        with pytest.raises(Crash):
            rig.plane().handle(WorkloadFinished("ns/train", Reason.DELETED, uid="job-1"))
        store.client = real
        # WHEN the sweeper runs, each DynamoDB action it takes recorded as IAM names it
        made: set[str] = set()

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            if model.name == "TransactWriteItems":
                made.update(f"dynamodb:{kind}Item" for op in params["TransactItems"] for kind in op)
            else:
                made.add(f"dynamodb:{model.name}")

        real.meta.events.register("before-parameter-build.dynamodb", record)
        report = sweep(store, rig.messages, rig.settings(), rig.clock(), rig.metrics)
    assert report.expiries == ["ns/train"]
    # THEN its role grants every one of them (and this test's list of them is the role's)
    assert made - {"dynamodb:TransactWriteItems"} <= SWEEPER_CALLS, sorted(made)
    assert {"dynamodb:UpdateItem", "dynamodb:DeleteItem"} <= made
