"""SecretSync: an operator of its own CRD, written on the ``runtime`` facade only.

A ``SecretSync`` named ``X`` in namespace ``N`` (``sync.example.com/v1alpha1``,
``config/crd.yaml``) copies the Secret ``N/X`` into each namespace of its
``spec.targetNamespaces``, keeps the copies equal to it, reports what it did in
status conditions and removes the copies when it is deleted (a finalizer: owner
references cannot cross namespaces, so the garbage collector cannot do it).

- :mod:`examples.secretsync.secretsync`: the resource, the reconciler and ``build``;
- :mod:`examples.secretsync.webhooks`: its validating and defaulting admission
  webhooks, for what the CRD's schema cannot check (``build(manager, webhooks=True)``;
  their configuration is ``config/webhook.yaml``);
- ``python -m examples.secretsync --kubeconfig ... [--webhooks]`` runs it;
- ``tests/``: its tests, on the framework's test kit against a real API server.

The tutorial in ``docs/tutorial.md`` builds it step by step.
"""
