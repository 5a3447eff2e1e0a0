"""The operator's validating admission webhooks (``ENABLE_WEBHOOKS=true``, as KubeRay).

KubeRay v1.7.0 serves a validating webhook per kind (``pkg/webhooks/v1``); these are
its RayCluster, RayService and RayJob ones, with KubeRay's paths and rules, and one for
RayCronJob, which KubeRay does not have:

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
  reconciler reports such a RayService, ``GatewayClassNotAllowed``);
- ``/validate-ray-io-v1-rayjob``: the name (at most 47 characters, a DNS-1035 label;
  :func:`controllers.rayjob.validation.admission_problems`, whose docstring says why the
  spec is left to the reconciler);
- ``/validate-ray-io-v1-raycronjob`` (beyond KubeRay, which has no RayCronJob webhook):
  the rules of :func:`controllers.rayjob.validation.cron_problems` on the RayCronJob's
  own fields - the name (at most 36 characters) on ``CREATE``; ``spec.schedule`` and
  ``spec.timeZone`` on ``CREATE`` and on an ``UPDATE`` that changes either. Not the
  ``jobTemplate`` (the RayJob rules, some behind the operator's ``RayJobDeletionPolicy``
  gate: the reconciler reports them, ``InvalidRayCronJobSpec``, as for a RayJob), and
  never on an update leaving the schedule as it was, so an update that only removes a
  finalizer of a RayCronJob stored invalid (before the webhook was on) always passes.
  Served whatever the ``RayCronJob`` gate: the CRD is installed either way, and a path
  the configuration names but the server lacks would refuse every RayCronJob
  (``failurePolicy: Fail``).

Each checks ``CREATE`` and ``UPDATE`` (the new object) and allows ``DELETE``. A refusal
is HTTP 422 ``Invalid`` with KubeRay's message shape,
``RayService.ray.io "<name>" is invalid: <problem>; <problem>``. Everything else the
reconcilers refuse (:func:`~controllers.rayservice.validation.problems`,
:func:`~controllers.rayjob.validation.problems`) is still reported on the object's
status or in a Warning, as in KubeRay.

:func:`setup` registers all four on the manager's webhook server; the
``ValidatingWebhookConfiguration`` pointing at them is :func:`configuration` (rendered
into ``config/overlays/webhooks`` by ``hack/gen_manifests.py``; the Helm chart has the
same).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic

from api import v1
from controllers.raycluster import validation as raycluster_validation
from controllers.rayjob import validation as rayjob_validation
from controllers.rayservice import gateway
from controllers.rayservice import validation as rayservice_validation
from runtime import manager as manager_
from runtime.client import resources
from runtime.webhook import admission
from runtime.webhook import server as webhook_server

__all__ = ["CONFIGURATION_NAME", "RayClusterValidator", "RayCronJobValidator", "RayJobValidator",
           "RayServiceValidator", "configuration", "setup"]  # fmt: skip

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
        found = self._problems(obj, old)
        if found:
            name = (obj.get("metadata") or {}).get("name", "")
            raise admission.Denied(
                f'{self.resource.kind}.{self.resource.group} "{name}" is invalid: '
                + "; ".join(found),
                code=422,
                reason="Invalid",
            )
        return []

    def _problems(self, obj: Obj, old: Obj | None) -> list[str]:
        """What is refused of ``obj`` (``old``: the object before an update)."""
        return self.problems(obj) + self._more(obj, old)

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


class RayJobValidator(_Validator):
    """KubeRay's rule: the name."""

    def __init__(self) -> None:
        super().__init__(v1.RayJob.RESOURCE, rayjob_validation.admission_problems)


def _schedule(obj: Obj | None) -> tuple[Any, Any]:
    spec = (obj or {}).get("spec")
    spec = spec if isinstance(spec, dict) else {}
    return spec.get("schedule"), spec.get("timeZone")


class RayCronJobValidator(_Validator):
    """The name on create; the schedule and its zone on create and when an update changes
    them (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(v1.RayCronJob.RESOURCE, lambda obj: [])

    def _problems(self, obj: Obj, old: Obj | None) -> list[str]:
        if old is not None and _schedule(old) == _schedule(obj):
            return []
        schedule, zone = _schedule(obj)
        meta = obj.get("metadata")
        name = meta.get("name", "") if isinstance(meta, dict) else ""
        spec: Obj = {"schedule": schedule, "jobTemplate": {}}
        if zone is not None:
            spec["timeZone"] = zone
        try:
            cron = v1.RayCronJob.model_validate({"metadata": {"name": name}, "spec": spec})
        except pydantic.ValidationError:
            return []  # not of the CRD's schema, which the API server refuses already
        found = rayjob_validation.cron_problems(cron)
        return [
            problem
            for problem in found
            if problem.startswith(("spec.schedule", "spec.timeZone"))
            or (old is None and problem.startswith("metadata."))
        ]


def setup(
    mgr: manager_.Manager,
    *,
    gateway_classes: gateway.GatewayClasses | None = None,
    incremental: bool = True,
) -> list[str]:
    """Serve the four webhooks on ``mgr``'s webhook server; their paths.
    ``gateway_classes`` and ``incremental`` go to :class:`RayServiceValidator`."""
    paths = webhook_server.register_for(
        mgr.webhook_server, v1.RayCluster.RESOURCE, validator=RayClusterValidator()
    )
    paths += webhook_server.register_for(
        mgr.webhook_server,
        v1.RayService.RESOURCE,
        validator=RayServiceValidator(gateway_classes, incremental=incremental),
    )
    paths += webhook_server.register_for(
        mgr.webhook_server, v1.RayJob.RESOURCE, validator=RayJobValidator()
    )
    paths += webhook_server.register_for(
        mgr.webhook_server, v1.RayCronJob.RESOURCE, validator=RayCronJobValidator()
    )
    return paths


def configuration(service: str, namespace: str) -> Obj:
    """The ValidatingWebhookConfiguration that sends RayCluster, RayService, RayJob and
    RayCronJob creates and updates to the Service ``namespace/service`` (port 443),
    refused if the call fails (``failurePolicy: Fail``, as KubeRay's)."""

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
            webhook("vrayjob.ray.io", v1.RayJob.RESOURCE),
            webhook("vraycronjob.ray.io", v1.RayCronJob.RESOURCE),
        ],
    }
