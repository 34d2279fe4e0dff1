"""The shipped ValidatingAdmissionPolicies, evaluated the way the API server does.

The CEL is evaluated by `celpy` (PyPI `cel-python`), a real CEL interpreter; this
module plays the API server's part around it, step by step as the admission plugin
does: match the request against `matchConstraints` (resource rules and the object
selector, which an UPDATE matches through either the old or the new object, and a
DELETE through the old one) and the binding's `matchResources` namespace selector
(against the labels the test gives the namespace), then `matchConditions`, then
`variables` (each bound under `variables.<name>`), then each validation, with the
policy's `failurePolicy: Fail` turning an evaluation error into a refusal.

Where it stands in for Kubernetes:
- Variables are evaluated in order and an error is kept as the variable's value,
  not raised: CEL's `&&`/`||` absorb it exactly as the API server's lazy variables
  do when a branch does not need them.
- The policies use standard CEL (`has`, `exists`, `all`, `map`, `filter`,
  `startsWith`, `contains`, `matches`, `int`, `string`, `bytes`, `size`) and one
  function of Kubernetes' list library, `sum()`, which gets a shim that adds as
  Kubernetes does; `compile_all` proves every expression parses. One shim mends
  celpy itself: its string `+` yields a plain Python `str`, on which its
  `contains` finds no overload, so `contains` is given a version that accepts both.
- A `/scale` request carries `autoscaling/v1` Scale objects (name, namespace, the
  replicas; no labels), as the API server builds them for a custom resource.
- celpy's `has()` on a missing intermediate field returns false where Kubernetes
  errors, so the policies guard every intermediate field themselves.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"

_ENV = celpy.Environment()

CONTROL_PLANE = {
    "username": "arn:aws:sts::111122223333:assumed-role/muster-IngestRole/ingest",
    "groups": ["muster-controlplane", "system:authenticated"],
}
TENANT = {"username": "alice@example.com", "groups": ["team-a-editors", "system:authenticated"]}
JOBSET_CONTROLLER = {
    "username": "system:serviceaccount:jobset-system:jobset-controller-manager",
    "groups": [
        "system:serviceaccounts",
        "system:serviceaccounts:jobset-system",
        "system:authenticated",
    ],
}
JOB_CONTROLLER = {
    "username": "system:serviceaccount:kube-system:job-controller",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
}

RESOURCES = {
    "Job": ("batch", "v1", "jobs"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "Pod": ("", "v1", "pods"),
    "Event": ("", "v1", "events"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Deployment": ("apps", "v1", "deployments"),
}
SCALE_KIND = {"group": "autoscaling", "version": "v1", "kind": "Scale"}


def documents() -> list[dict[str, Any]]:
    out = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        out.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return out


@functools.cache
def _documents() -> tuple[dict[str, Any], ...]:
    return tuple(documents())


def policies() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d for d in _documents() if d["kind"] == "ValidatingAdmissionPolicy"
    }


def bindings() -> dict[str, dict[str, Any]]:
    return {
        d["spec"]["policyName"]: d
        for d in _documents()
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }


def shipped_params() -> dict[str, Any]:
    [params] = [
        d
        for d in _documents()
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "muster-policy-params"
    ]
    return params


def expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    out = [c["expression"] for c in spec.get("matchConditions", [])]
    out += [v["expression"] for v in spec.get("variables", [])]
    for v in spec.get("validations", []):
        out.append(v["expression"])
        if "messageExpression" in v:
            out.append(v["messageExpression"])
    return out


def request(
    operation: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    *,
    user: dict[str, Any] | None = None,
    sub_resource: str = "",
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionRequest as the API server builds it (empty fields omitted, as in JSON).

    `options` are a DELETE's DeleteOptions (the API server sends them even when the
    client gave none: then only their kind)."""
    subject = obj if obj is not None else old
    assert subject is not None
    group, version, plural = RESOURCES[subject["kind"]]
    meta = subject["metadata"]
    kind = {"group": group, "version": version, "kind": subject["kind"]}
    req: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": kind,
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": dict(kind),
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
        "operation": operation,
        "userInfo": copy.deepcopy(user or TENANT),
        "dryRun": False,
    }
    if sub_resource:
        req["subResource"] = sub_resource
        req["requestSubResource"] = sub_resource
    if operation == "DELETE":
        req["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"} | (options or {})
    return {
        "request": req,
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
    }


def scale_request(
    workload: dict[str, Any],
    old_replicas: int,
    new_replicas: int,
    *,
    user: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An UPDATE of `workload`'s /scale subresource, as `kubectl scale` sends it."""
    meta = workload["metadata"]

    def scale(replicas: int) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"replicas": replicas},
            "status": {"replicas": old_replicas},
        }

    review = request("UPDATE", workload, workload, user=user, sub_resource="scale")
    review["request"]["kind"] = dict(SCALE_KIND)
    review["request"]["requestKind"] = dict(SCALE_KIND)
    review["object"], review["oldObject"] = scale(new_replicas), scale(old_replicas)
    return review


@dataclass
class Verdict:
    matched: bool
    denials: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials


def _contains(container: Any, item: Any) -> Any:
    """Standard CEL `contains` for a concatenated string too (see the module docstring)."""
    if isinstance(container, str):
        return celpy.celtypes.BoolType(str(item) in container)
    return celpy.celtypes.BoolType(container.contains(item))


def _sum(items: Any) -> Any:
    """Kubernetes' list `sum()`: the elements added up, 0 for an empty list."""
    total = celpy.celtypes.IntType(0)
    for item in items:
        total = total + item
    return total


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression), functions={"contains": _contains, "sum": _sum})


def _eval(expression: str, activation: dict[str, Any]) -> Any:
    program = _program(expression)
    try:
        return program.evaluate(activation)
    except celpy.CELEvalError as exc:
        return exc


def _rule_matches(rule: dict[str, Any], req: dict[str, Any]) -> bool:
    res = req["resource"]
    resource = res["resource"] + (f"/{req['subResource']}" if req.get("subResource") else "")

    def any_of(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    resources = rule["resources"]
    resource_ok = (
        resource in resources or ("*" in resources and "/" not in resource) or ("*/*" in resources)
    )
    return (
        any_of(rule["apiGroups"], res["group"])
        and any_of(rule["apiVersions"], res["version"])
        and any_of(rule["operations"], req["operation"])
        and resource_ok
    )


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "Exists", "only Exists is used by the shipped policies"
        if expr["key"] not in labels:
            return False
    return True


def _selector_matches(selector: dict[str, Any] | None, review: dict[str, Any]) -> bool:
    if not selector:
        return True

    def labels_match(obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        return _labels_match(selector, obj["metadata"].get("labels") or {})

    # The API server matches an UPDATE if either the old or the new object matches.
    return labels_match(review["object"]) or labels_match(review["oldObject"])


def evaluate(
    name: str,
    review: dict[str, Any],
    params: dict[str, Any] | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> Verdict:
    """What the named shipped policy, through its binding, says about one request."""
    policy = policies()[name]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    constraints = spec["matchConstraints"]
    if not any(_rule_matches(r, review["request"]) for r in constraints["resourceRules"]):
        return Verdict(matched=False)
    if not _selector_matches(constraints.get("objectSelector"), review):
        return Verdict(matched=False)
    namespaces = (bindings()[name]["spec"].get("matchResources") or {}).get("namespaceSelector")
    if namespaces and not _labels_match(namespaces, namespace_labels or {}):
        return Verdict(matched=False)
    context: dict[str, Any] = dict(review)
    if "paramKind" in spec:
        context["params"] = params if params is not None else shipped_params()
    activation = celpy.json_to_cel(context)
    for condition in spec.get("matchConditions", []):
        result = _eval(condition["expression"], activation)
        if isinstance(result, celpy.CELEvalError):
            return Verdict(True, [f"matchCondition {condition['name']} failed: {result}"])
        if not result:
            return Verdict(matched=False)
    variables: dict[str, Any] = {}
    activation["variables"] = celpy.celtypes.MapType(variables)
    for variable in spec.get("variables", []):
        variables[celpy.celtypes.StringType(variable["name"])] = _eval(
            variable["expression"], activation
        )
        activation["variables"] = celpy.celtypes.MapType(variables)
    denials = []
    for validation in spec["validations"]:
        result = _eval(validation["expression"], activation)
        if result is True or (not isinstance(result, celpy.CELEvalError) and bool(result)):
            continue
        if isinstance(result, celpy.CELEvalError):
            denials.append(f"{validation['expression']!r} failed: {result}")
            continue
        message = validation.get("message", "")
        if "messageExpression" in validation:
            rendered = _eval(validation["messageExpression"], activation)
            if not isinstance(rendered, celpy.CELEvalError):
                message = str(rendered)
        denials.append(message)
    return Verdict(True, denials)


def admitted_by_all(
    review: dict[str, Any],
    params: dict[str, Any] | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> Verdict:
    """Every shipped policy at once, as the API server applies them."""
    denials: list[str] = []
    matched = False
    for name in policies():
        verdict = evaluate(name, review, params, namespace_labels)
        matched = matched or verdict.matched
        denials += verdict.denials
    return Verdict(matched, denials)


def compile_all() -> int:
    count = 0
    for policy in policies().values():
        for expression in expressions(policy):
            _ENV.compile(expression)
            count += 1
    return count
