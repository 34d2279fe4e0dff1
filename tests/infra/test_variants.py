"""Configuration variants change the stack as documented; cdk-nag guards the synth."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template

from infra import constants as c
from infra.app import build_app
from infra.stack import MusterStack
from tests.infra.conftest import deployment_context

pytestmark = pytest.mark.slow


def synth(tmp_path: Any, **overrides: Any) -> Template:
    app = build_app(cdk.App(context=deployment_context() | overrides, outdir=str(tmp_path)))
    stack = app.node.find_child(overrides.get(c.CTX_STACK_NAME, "Muster"))
    assert isinstance(stack, MusterStack)
    return Template.from_stack(stack)


def test_an_existing_topic_without_access_entries_and_with_destroy(tmp_path: Any) -> None:
    # GIVEN a test cluster's configuration
    template = synth(
        tmp_path,
        **{
            c.CTX_ALARM_TOPIC_ARN: "arn:aws:sns:eu-west-1:123456789012:platform-alarms",
            c.CTX_CREATE_EKS_ACCESS: False,
            c.CTX_REMOVAL_POLICY: "destroy",
            c.CTX_LOG_RETENTION_DAYS: 7,
        },
    )
    # THEN alarms notify the given topic, no topic or key is created ...
    template.resource_count_is("AWS::SNS::Topic", 0)
    template.resource_count_is("AWS::KMS::Key", 0)
    alarms = template.find_resources("AWS::CloudWatch::Alarm")
    assert alarms
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [
            "arn:aws:sns:eu-west-1:123456789012:platform-alarms"
        ]
    # ... no EKS access is created, and the table goes with the stack
    template.resource_count_is("AWS::EKS::AccessEntry", 0)
    template.resource_count_is("AWS::EKS::PodIdentityAssociation", 0)
    template.has_resource("AWS::DynamoDB::Table", {"DeletionPolicy": "Delete"})
    template.has_resource_properties("AWS::DynamoDB::Table", {"DeletionProtectionEnabled": False})
    for group in template.find_resources("AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == 7


def test_settings_thresholds_and_alarm_email_reach_the_stack(tmp_path: Any) -> None:
    template = synth(
        tmp_path,
        **{
            c.CTX_SETTINGS: {"timeout": "15m", "blockAdmission": True},
            c.CTX_ALARM_THRESHOLDS: {"evictionsPerHour": 3},
            c.CTX_STACK_NAME: "MusterSpot",
            c.CTX_ALARM_EMAIL: "platform@example.com",
        },
    )
    template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "platform@example.com"}
    )
    for function in template.find_resources("AWS::Lambda::Function").values():
        env = function["Properties"]["Environment"]["Variables"]
        assert env[c.ENV_SETTINGS] == '{"blockAdmission":true,"timeout":"15m"}'
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"AlarmName": "MusterSpot-EvictionsHigh", "Threshold": 3}
    )
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine", {"StateMachineName": "MusterSpot-ReadinessTimers"}
    )


def test_an_unacknowledged_finding_fails_the_synth(tmp_path: Any) -> None:
    # GIVEN the app with a queue that has neither a DLQ nor TLS enforcement
    app = build_app(cdk.App(context=deployment_context(), outdir=str(tmp_path)))
    sqs.Queue(app.node.find_child("Muster"), "Careless")
    # WHEN it is synthesised THEN cdk-nag's AwsSolutions checks fail it
    with pytest.raises(RuntimeError, match="ValidationFailed") as failure:
        app.synth()
    assert "Muster/Careless/Resource" in str(failure.value)
    assert "AwsSolutions-SQS3" in str(failure.value)
    # and only the careless queue: everything of Muster itself is compliant or acknowledged
    assert str(failure.value).count("ERROR") == 2
