"""The operator's validating admission webhooks (``ENABLE_WEBHOOKS=true``, as KubeRay).

KubeRay v1.7.0 serves a validating webhook per kind (``pkg/webhooks/v1``); these are
the RayCluster and RayService ones (this operator has no RayJob), with KubeRay's paths
and rules:

- ``/validate-ray-io-v1-raycluster``: the name (at most 53 characters, a DNS-1035
  label) and worker group names used twice
  (:func:`controllers.raycluster.validation.admission_problems`);
- ``/validate-ray-io-v1-rayservice``: the name (at most 47 characters, a DNS-1035
  label) and the ``ray.io/initializing-timeout`` annotation
  (:func:`controllers.rayservice.validation.admission_problems`); and, beyond KubeRay,
  when the operator hands it its ``--gateway-classes``, a Gateway of a class it does not
  allow (:func:`controllers.rayservice.validation.gateway_class_problems`): refused on
  ``CREATE``, and on an ``UPDATE`` that changes the class asked for (one that leaves it
  as it was is allowed, so that the operator can still remove its finalizer; the
  reconciler reports such a RayService, ``GatewayClassNotAllowed``).

Both check ``CREATE`` and ``UPDATE`` (the new object) and allow ``DELETE``. A refusal
is HTTP 422 ``Invalid`` with KubeRay's message shape,
``RayService.ray.io "<name>" is invalid: <problem>; <problem>``. Everything else the
reconcilers refuse (:func:`~controllers.rayservice.validation.problems`) is still
reported on the object's status, as in KubeRay.

:func:`setup` registers both on the manager's webhook server; the
``ValidatingWebhookConfiguration`` pointing at them is :func:`configuration` (rendered
into ``config/webhook`` by ``hack/gen_manifests.py``; the Helm chart has the same).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from api import v1
from controllers.raycluster import validation as raycluster_validation
from controllers.rayservice import gateway
from controllers.rayservice import validation as rayservice_validation
from runtime import manager as manager_
from runtime.client import resources
from runtime.webhook import admission
from runtime.webhook import server as webhook_server

__all__ = ["CONFIGURATION_NAME", "RayClusterValidator", "RayServiceValidator", "configuration",
           "setup"]  # fmt: skip

CONFIGURATION_NAME = "rayservice-operator-validating-webhook-configuration"
"""The ValidatingWebhookConfiguration's name in ``config/webhook`` and the chart."""

Obj = dict[str, Any]
Problems = Callable[[Mapping[str, Any]], list[str]]


class _Validator:
    """KubeRay's validator shape: the same rules on create and update, none on delete."""

    def __init__(self, resource: resources.Resource, problems: Problems) -> None:
        self.resource = resource
        self.problems = problems

    def _check(self, obj: Obj, old: Obj | None = None) -> Sequence[str]:
        found = self.problems(obj) + self._more(obj, old)
        if found:
            name = (obj.get("metadata") or {}).get("name", "")
            raise admission.Denied(
                f'{self.resource.kind}.{self.resource.group} "{name}" is invalid: '
                + "; ".join(found),
                code=422,
                reason="Invalid",
            )
        return []

    def _more(self, obj: Obj, old: Obj | None) -> list[str]:
        """Rules beyond KubeRay's (``old``: the object before an update)."""
        return []

    async def validate_create(self, obj: Obj, request: admission.Request) -> Sequence[str]:
        return self._check(obj)

    async def validate_update(
        self, old: Obj, obj: Obj, request: admission.Request
    ) -> Sequence[str]:
        return self._check(obj, old)

    async def validate_delete(self, old: Obj, request: admission.Request) -> Sequence[str]:
        return []


class RayClusterValidator(_Validator):
    def __init__(self) -> None:
        super().__init__(v1.RayCluster.RESOURCE, raycluster_validation.admission_problems)


class RayServiceValidator(_Validator):
    """KubeRay's rules; with ``gateway_classes`` (the operator's allow-list) also the
    GatewayClass (see the module docstring). ``incremental``: the
    ``RayServiceIncrementalUpgrade`` gate (off, no Gateway is ever made)."""

    def __init__(
        self, gateway_classes: gateway.GatewayClasses | None = None, *, incremental: bool = True
    ) -> None:
        super().__init__(v1.RayService.RESOURCE, rayservice_validation.admission_problems)
        self.gateway_classes = gateway_classes
        self.incremental = incremental

    def _more(self, obj: Obj, old: Obj | None) -> list[str]:
        if self.gateway_classes is None:
            return []
        if old is not None and rayservice_validation.requested_gateway_class(
            old, incremental=self.incremental
        ) == rayservice_validation.requested_gateway_class(obj, incremental=self.incremental):
            return []
        return rayservice_validation.gateway_class_problems(
            obj, self.gateway_classes, incremental=self.incremental
        )


def setup(
    mgr: manager_.Manager,
    *,
    gateway_classes: gateway.GatewayClasses | None = None,
    incremental: bool = True,
) -> list[str]:
    """Serve both webhooks on ``mgr``'s webhook server; their paths. ``gateway_classes``
    and ``incremental`` go to :class:`RayServiceValidator`."""
    paths = webhook_server.register_for(
        mgr.webhook_server, v1.RayCluster.RESOURCE, validator=RayClusterValidator()
    )
    paths += webhook_server.register_for(
        mgr.webhook_server,
        v1.RayService.RESOURCE,
        validator=RayServiceValidator(gateway_classes, incremental=incremental),
    )
    return paths


def configuration(service: str, namespace: str) -> Obj:
    """The ValidatingWebhookConfiguration that sends RayCluster and RayService creates and
    updates to the Service ``namespace/service`` (port 443), refused if the call fails
    (``failurePolicy: Fail``, as KubeRay's)."""

    def webhook(name: str, resource: resources.Resource) -> Obj:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": service, "namespace": namespace,
                                         "path": webhook_server.validate_path(resource)}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [{"apiGroups": [resource.group], "apiVersions": [resource.version],
                       "operations": ["CREATE", "UPDATE"], "resources": [resource.plural]}],
        }  # fmt: skip

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [
            webhook("vraycluster.ray.io", v1.RayCluster.RESOURCE),
            webhook("vrayservice.ray.io", v1.RayService.RESOURCE),
        ],
    }
