"""Alarms, the operations dashboard and the SNS topic the alarms notify.

The alarms answer "is the control plane healthy?" (DLQs, function errors and
throttles, timers that failed, the ingest queue falling behind) and "are the
gangs healthy?" (evictions and deactivations above a threshold).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra import constants as c
from infra.config import AlarmThresholds, MusterConfig
from infra.queues import QueueWithDlq

FIVE_MINUTES = Duration.minutes(5)
ONE_HOUR = Duration.hours(1)


class Monitoring(Construct):
    """One alarm per failure mode, all notifying one topic; one dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: MusterConfig,
        queues: dict[str, QueueWithDlq],
        functions: dict[str, lambda_.Function],
        state_machine: sfn.StateMachine,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.thresholds: AlarmThresholds = config.alarm_thresholds
        self.topic = self._topic(config, removal_policy)
        self.alarms: dict[str, _NamedAlarm] = {}

        oldest = {
            c.INGEST: self.thresholds.ingest_oldest_message_seconds,
            c.TIMER: self.thresholds.timer_oldest_message_seconds,
            c.ADMISSION: self.thresholds.admission_oldest_message_seconds,
        }
        for name, pair in queues.items():
            title = name.capitalize()
            self._alarm(
                f"{title}DeadLetters",
                pair.dlq.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                self.thresholds.dlq_messages,
                f"Messages of the {name} queue failed {c.MAX_RECEIVE_COUNT} times and wait in its DLQ; "
                "inspect them, fix the cause, then redrive.",
            )
            self._alarm(
                f"{title}QueueBehind",
                pair.queue.metric_approximate_age_of_oldest_message(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                oldest[name],
                f"The oldest message of the {name} queue is older than {oldest[name]} s: "
                "the control plane is falling behind.",
            )
        for name, function in functions.items():
            title = name.capitalize()
            self._alarm(
                f"{title}Errors",
                function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                self.thresholds.function_errors,
                f"The {name} function failed; its messages are retried and may reach the DLQ.",
            )
            self._alarm(
                f"{title}Throttles",
                function.metric_throttles(period=FIVE_MINUTES, statistic="Sum"),
                self.thresholds.function_throttles,
                f"The {name} function is throttled (the account's concurrency).",
            )
        self._alarm(
            "TimerExecutionsFailed",
            state_machine.metric_failed(period=FIVE_MINUTES, statistic="Sum"),
            self.thresholds.timer_executions_failed,
            "Readiness timers failed to signal the timer queue; the sweeper signals those "
            "deadlines a minute or two late.",
        )
        self._alarm(
            "TimerExecutionsTimedOut",
            state_machine.metric_timed_out(period=FIVE_MINUTES, statistic="Sum"),
            self.thresholds.timer_executions_failed,
            "Readiness timers timed out; deadlines may be missed.",
        )
        self._alarm(
            "EvictionsHigh",
            self.timeout_evictions(ONE_HOUR),
            self.thresholds.evictions_per_hour,
            f"More than {self.thresholds.evictions_per_hour} gangs per hour were evicted for not "
            "becoming ready in time: capacity is short or the timeout is too tight.",
        )
        self._alarm(
            "WorkloadsQuarantined",
            _muster_metric(c.METRIC_QUARANTINED, FIVE_MINUTES, statistic="Maximum"),
            self.thresholds.quarantined_workloads,
            "Workloads are quarantined: their effects kept failing (e.g. the API server refuses "
            "them); nothing is done for them. `muster status` names them and the error; fix the "
            "cause, then `muster release WORKLOAD`.",
        )
        self._alarm(
            "DeactivationsHigh",
            _muster_metric(c.METRIC_DEACTIVATIONS, ONE_HOUR),
            self.thresholds.deactivations_per_hour,
            "Workloads exceeded their requeuing limit, or failed on their own more than "
            "workloadFaults.limitCount times in a row, and were deactivated; their owners must act.",
        )
        self.dashboard = self._dashboard(queues, functions, state_machine)

    # ---------------------------------------------------------------- pieces

    def _topic(self, config: MusterConfig, removal_policy: RemovalPolicy) -> sns.ITopic:
        if config.alarm_topic_arn:
            return sns.Topic.from_topic_arn(self, "AlarmTopic", config.alarm_topic_arn)
        key = kms.Key(
            self,
            "AlarmTopicKey",
            description="Muster alarm topic encryption",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        # CloudWatch must be able to publish to the encrypted topic, for this stack's
        # alarms only (every alarm here is named `<stack>-<name>`): not for another
        # account's alarms or this account's others (the confused deputy).
        stack = Stack.of(self)
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AlarmsPublishToTheTopic",
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="cloudwatch",
                            resource="alarm",
                            resource_name=f"{stack.stack_name}-*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    },
                },
            )
        )
        topic = sns.Topic(
            self, "AlarmTopic", display_name="Muster alarms", master_key=key, enforce_ssl=True
        )
        if config.alarm_email:
            topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
        return topic

    def _alarm(
        self, name: str, metric: cw.IMetric, threshold: int, description: str
    ) -> _NamedAlarm:
        alarm = _NamedAlarm(
            self,
            name,
            alarm_name=f"{Stack.of(self).stack_name}-{name}",
            alarm_description=description,
            metric=metric,
            threshold=threshold,
            evaluation_periods=1,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        alarm.add_ok_action(actions.SnsAction(self.topic))
        self.alarms[name] = alarm
        return alarm

    @staticmethod
    def timeout_evictions(period: Duration) -> cw.MathExpression:
        """All readiness-timeout evictions (startup and recovery) in one series."""
        metrics = {
            f"e{i}": _muster_metric(c.METRIC_EVICTIONS, period, reason=reason, cause=cause)
            for i, (reason, cause) in enumerate(c.TIMEOUT_EVICTIONS)
        }
        return cw.MathExpression(
            expression=" + ".join(f"FILL({key}, 0)" for key in metrics),
            using_metrics=metrics,
            label="Readiness-timeout evictions",
            period=period,
        )

    def _dashboard(
        self,
        queues: dict[str, QueueWithDlq],
        functions: dict[str, lambda_.Function],
        state_machine: sfn.StateMachine,
    ) -> cw.Dashboard:
        dashboard = cw.Dashboard(
            self, "Dashboard", dashboard_name=f"{Stack.of(self).stack_name}-operations"
        )
        period = FIVE_MINUTES
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Lifecycle",
                left=[
                    _muster_metric(c.METRIC_ADMISSIONS, period),
                    _muster_metric(c.METRIC_PODS_READY, period),
                    _muster_metric(c.METRIC_REQUEUES, period),
                    _muster_metric(c.METRIC_DEACTIVATIONS, period),
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Admitted to PodsReady (seconds)",
                left=[
                    _muster_metric(c.METRIC_ADMITTED_TO_READY, period, statistic=stat)
                    for stat in ("p50", "p90", "Maximum")
                ],
                width=12,
            ),
        )
        evictions_by_reason = cw.MathExpression(
            expression=(
                f"SEARCH('{{{c.METRICS_NAMESPACE},cause,reason,service}} "
                f"MetricName=\"{c.METRIC_EVICTIONS}\"', 'Sum', 300)"
            ),
            label="",
            period=period,
        )
        ignored_by_outcome = cw.MathExpression(
            expression=(
                f"SEARCH('{{{c.METRICS_NAMESPACE},outcome,service}} "
                f"MetricName=\"{c.METRIC_IGNORED_EVENTS}\"', 'Sum', 300)"
            ),
            label="",
            period=period,
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Evictions by reason and cause", left=[evictions_by_reason], width=12
            ),
            cw.GraphWidget(
                title="Events not applied",
                left=[ignored_by_outcome, _muster_metric(c.METRIC_INVALID_EVENTS, period)],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Queue depth",
                left=[
                    pair.queue.metric_approximate_number_of_messages_visible(
                        period=period, label=name
                    )
                    for name, pair in queues.items()
                ],
                right=[
                    pair.dlq.metric_approximate_number_of_messages_visible(
                        period=period, label=f"{name} DLQ"
                    )
                    for name, pair in queues.items()
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Oldest message (seconds)",
                left=[
                    pair.queue.metric_approximate_age_of_oldest_message(period=period, label=name)
                    for name, pair in queues.items()
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Function errors and throttles",
                left=[
                    f.metric_errors(period=period, label=f"{n} errors")
                    for n, f in functions.items()
                ],
                right=[
                    f.metric_throttles(period=period, label=f"{n} throttles")
                    for n, f in functions.items()
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Readiness timers",
                left=[
                    state_machine.metric_started(period=period, label="started"),
                    state_machine.metric_succeeded(period=period, label="deadline reached"),
                    state_machine.metric_aborted(period=period, label="stopped (gang ready)"),
                    state_machine.metric_failed(period=period, label="failed"),
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Isolation and the sweeper",
                left=[
                    _muster_metric(c.METRIC_QUARANTINED, period, statistic="Maximum"),
                    _muster_metric(c.METRIC_QUARANTINES, period),
                ],
                right=[_muster_metric(c.METRIC_SWEEPER_RESENT, period)],
                width=24,
            ),
        )
        # Alarms by name rather than `Fn::GetAtt Arn`, which some AWS emulators cannot resolve.
        by_name = [
            cw.Alarm.from_alarm_name(self, f"{key}Status", alarm.alarm_name_literal)
            for key, alarm in self.alarms.items()
        ]
        dashboard.add_widgets(cw.AlarmStatusWidget(alarms=by_name, title="Alarms", width=24))
        return dashboard


def _muster_metric(
    name: str, period: Duration, statistic: str = "Sum", **dimensions: str
) -> cw.Metric:
    return cw.Metric(
        namespace=c.METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": c.SERVICE_NAME, **dimensions},
        statistic=statistic,
        period=period,
    )


class _NamedAlarm(cw.Alarm):
    """An alarm that remembers the literal name it was given."""

    def __init__(
        self, scope: Construct, construct_id: str, *, alarm_name: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, alarm_name=alarm_name, **kwargs)
        self.alarm_name_literal = alarm_name
