"""Finding the deployment, and its settings through one path.

The stack's outputs name the ingest function; that function's environment names
the table, the queues and the deployment's settings. `Deployment.settings()` is
the one way every command reads settings: a bad deployment document or a bad
runtime record is an `AdminError` that names what is wrong, the same for every
command.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from muster import contract
from muster.admin.errors import AdminError, BadInput, listed
from muster.botocore_config import BOTOCORE_RETRIES
from muster.core import Kind, Settings, SettingsError
from muster.core.keys import canonical_key, kind_keys, parse_workload_key

LOCAL_REGION = "us-east-1"


@dataclass(frozen=True)
class SettingsSources:
    """The deployment's settings, the runtime record over them, and what they make together."""

    base: Settings
    deployment: dict[str, Any]
    record: dict[str, Any]
    record_version: int | None
    problem: str | None  # why the record cannot be used, or None

    def effective(self) -> Settings:
        """The settings the functions use now; a bad record is an error naming its fields."""
        from muster.runtime.settings import effective_settings

        if self.problem is not None:
            raise AdminError(self.problem)
        return effective_settings(self.base, self.record)[0]


@dataclass(frozen=True)
class Deployment:
    """A deployed control plane as the functions see it."""

    stack: str
    session: Any  # boto3.session.Session
    config: Any  # muster.aws.config.RuntimeConfig
    function_name: str

    def store(self) -> Any:
        from muster.lambdas.wiring import dynamo_store

        return dynamo_store(self.config, self.session)

    def messages(self) -> Any:
        from muster.lambdas.wiring import sqs_messages

        return sqs_messages(self.config, self.session)

    def settings(self, store: Any = None) -> SettingsSources:
        """The deployment's settings and the runtime record, each checked by the core's parser.

        The functions log a bad record and go on with the deployment's settings; a
        command says so instead, naming every wrong field.
        """
        from muster.runtime.settings import effective_settings, settings_from_json

        source = f"{contract.ENV_SETTINGS} of {self.function_name}"
        try:
            base = settings_from_json(self.config.settings_json, source)
        except SettingsError as exc:
            raise AdminError(
                f"the deployment's settings are invalid: {listed(exc.errors)}"
            ) from None
        deployment = json.loads(self.config.settings_json or "{}")
        found = (store or self.store()).settings_record()
        record, version = (dict(found[0]), found[1]) if found else ({}, None)
        problem = None
        invalid = effective_settings(base, record)[1]
        if invalid is not None:
            problem = (
                f"the runtime settings record (version {version}) is invalid, so the functions "
                f"use the deployment's settings until it is fixed: "
                f"{listed(invalid.prefixed('record').errors)}\n"
                "  fix it with `muster settings set KEY=VALUE` (KEY=null returns a key to the "
                "deployment's value)"
            )
        return SettingsSources(base, deployment, record, version, problem)


def check_endpoint(endpoint: str) -> None:
    """`--endpoint` is a URL with its scheme (boto3 refuses `localhost:4566` deep inside)."""
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        bare = endpoint.split("://", 1)[-1]
        raise BadInput(
            f"--endpoint {endpoint!r} is not an http(s) URL; give the scheme too, "
            f"e.g. --endpoint http://{bare or '127.0.0.1:4566'}"
        )


def use_endpoint(endpoint: str, region: str | None) -> None:
    """Point boto3 in this process at a local endpoint, with the emulator's dummy credentials."""
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    os.environ.setdefault("AWS_DEFAULT_REGION", region or LOCAL_REGION)


@dataclass(frozen=True)
class Stack:
    """A deployed Muster stack: its name, outputs, where it is, and the session that read it."""

    name: str
    outputs: dict[str, str]
    session: Any  # boto3.session.Session
    where: str  # "in eu-west-1", "at http://127.0.0.1:4566": for messages


@contextmanager
def _aws_errors(name: str, where: str, endpoint: str | None) -> Iterator[None]:
    """AWS failures while reading the stack, as the one message each deserves."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    try:
        yield
    except NoCredentialsError:
        raise AdminError(
            "no AWS credentials: configure a profile (AWS_PROFILE) or give --endpoint "
            "for a local deployment"
        ) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if "does not exist" in str(error.get("Message", "")):
            raise AdminError(
                f"no stack named {name} {where}; choose it with --stack"
                + ("" if endpoint else " (and --region)")
            ) from None
        raise AdminError(f"reading stack {name} {where}: {error.get('Message', exc)}") from None
    except BotoCoreError as exc:
        raise AdminError(f"reading stack {name} {where}: {exc}") from None


def read_stack(stack: str | None, region: str | None, endpoint: str | None) -> Stack:
    """The stack's outputs (OutputKey -> OutputValue), read with DescribeStacks."""
    import boto3

    if endpoint:
        check_endpoint(endpoint)
        use_endpoint(endpoint, region)
    name = stack or (contract.LOCAL_STACK_NAME if endpoint else contract.DEFAULT_STACK_NAME)
    session = boto3.session.Session(region_name=region or (LOCAL_REGION if endpoint else None))
    where = f"at {endpoint}" if endpoint else f"in {session.region_name or 'the default region'}"
    with _aws_errors(name, where, endpoint):
        stacks = session.client("cloudformation", config=BOTOCORE_RETRIES).describe_stacks(
            StackName=name
        )["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return Stack(name, outputs, session, where)


def connect(stack: str | None, region: str | None, endpoint: str | None) -> Deployment:
    """Find the runtime configuration from the stack's outputs and its ingest function."""
    from muster.aws.config import ConfigError, RuntimeConfig

    found = read_stack(stack, region, endpoint)
    name, session, where = found.name, found.session, found.where
    function = found.outputs.get(contract.OUT_INGEST_FUNCTION_NAME)
    if not function:
        raise AdminError(
            f"stack {name} {where} has no output {contract.OUT_INGEST_FUNCTION_NAME}; "
            f"is it a Muster stack? (outputs: {', '.join(sorted(found.outputs)) or 'none'})"
        )
    with _aws_errors(name, where, endpoint):
        reply = session.client("lambda", config=BOTOCORE_RETRIES).get_function_configuration(
            FunctionName=function
        )
    env = reply.get("Environment", {}).get("Variables", {})
    try:
        config = RuntimeConfig.from_env(env)
    except ConfigError as exc:
        raise AdminError(f"the environment of function {function}: {exc}") from None
    return Deployment(name, session, config, function)


def workload_key(store: Any, name: str) -> str:
    """The key `name` means: as given (a kind's marker in any case), `default/name` when
    only that exists (kubectl's default namespace), or, for `ns/x` that no Job has, the
    one other kind's `ns/x@kind` that exists (an error naming them if several do)."""
    spellings = [_canonical(name)] if "/" in name else [name, _canonical(f"default/{name}")]
    for key in spellings:
        if store.load(key) is not None:
            return key
    found = [k for key in spellings for k in _other_kinds(key) if store.load(k) is not None]
    if len(found) > 1:
        raise AdminError(f"{name} names several workloads: {', '.join(found)}; give one of them")
    return found[0] if found else spellings[0]


def _canonical(key: str) -> str:
    try:
        return canonical_key(key)
    except ValueError:
        return key


def _other_kinds(key: str) -> tuple[str, ...]:
    """The keys of the other kinds' objects of a Job's key's namespace and name."""
    try:
        namespace, name, kind = parse_workload_key(key)
    except ValueError:
        return ()
    return kind_keys(namespace, name)[1:] if kind is Kind.JOB else ()
