"""Admission and conversion webhooks served by the manager.

- :mod:`runtime.webhook.server`: :class:`~runtime.webhook.server.Server`, the HTTPS
  server (a manager runnable; certificates from files, reloaded when rotated, or
  self-signed with the CA injected), its registration API and its metrics;
- :mod:`runtime.webhook.intake`: what the server reads - body size, shape and how many
  at once (:class:`~runtime.webhook.intake.Limits`), checked before a body is parsed;
- :mod:`runtime.webhook.admission`: the typed AdmissionReview, and the
  :class:`~runtime.webhook.admission.Validator` and
  :class:`~runtime.webhook.admission.Defaulter` protocols;
- :mod:`runtime.webhook.conversion`: the ConversionReview and the
  :class:`~runtime.webhook.conversion.Converter` protocol;
- :mod:`runtime.webhook.jsonpatch`: the RFC 6902 diff a defaulter's answer is made of;
- :mod:`runtime.webhook.cainject`: ``caBundle`` written into webhook configurations and CRDs.

Registering through the builder (the manager makes the server on first use)::

    Builder(manager).for_(WIDGETS).with_validator(v).with_defaulter(d).complete(reconciler)

or without a controller::

    server.register_for(manager.webhook_server, WIDGETS, validator=v, defaulter=d)
"""

from runtime.webhook import admission, cainject, conversion, intake, jsonpatch, server

__all__ = ["admission", "cainject", "conversion", "intake", "jsonpatch", "server"]
