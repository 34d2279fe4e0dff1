"""Where the agent reaches the Kubernetes API server, found as kubectl finds it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from muster.kube.http import KubeApi


class KubeConfigMissing(Exception):
    """No way to reach a Kubernetes API server was found; the message says where it looked."""


def kube_configuration(kubeconfig: str | None, environ: Any = None) -> Any:
    """Where to reach the API server, found as kubectl finds it.

    An explicit kubeconfig first; inside a pod, the service account; otherwise
    the default kubeconfig (the KUBECONFIG list, else ~/.kube/config).
    """
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    environ = os.environ if environ is None else environ
    configuration = k8s.Configuration()
    try:
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"),
                client_configuration=configuration,
            )
    except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = kubeconfig or environ.get("KUBECONFIG") or "~/.kube/config"
        raise KubeConfigMissing(
            f"cannot reach a Kubernetes API server: {where}: {exc}; give --kubeconfig FILE "
            "(or set KUBECONFIG), or run inside the cluster"
        ) from None
    return configuration


def agent_api(kubeconfig: str | None) -> KubeApi:
    """The agent's API client: its credentials as the kubernetes client loads them.

    The official client (the `agent` extra) reads the in-cluster service account
    or a kubeconfig, with its refreshing tokens and exec plugins; requests then go
    through Muster's own `KubeApi`, like the control plane's.
    """
    from muster.kube.http import KubeApi

    configuration = kube_configuration(kubeconfig)  # KubeConfigMissing when none is found
    return KubeApi(
        configuration.host,
        # The loaders store the whole header value ("Bearer ..."), refreshed by their hook.
        authorization=lambda: configuration.get_api_key_with_prefix("BearerToken"),
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
    )
