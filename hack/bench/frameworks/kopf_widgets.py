"""The benchmark's Widget controller on Kopf, run with Kopf's CLI.

The same controller as ``ours.py`` beside this file: every
``widgets.bench.example.com`` object's status is kept equal to ``area = size *
size``, ``label = color.upper()``, ``observedGeneration = metadata.generation``.

Kopf's idiomatic way: one async handler registered for creation, updates and
resumption (``@kopf.on.create/update/resume``) that sets the status fields through
the ``patch`` kwarg (``patch.status[...]``); Kopf merges it into the one patch it
sends after the handler (a handler's *return value* would land under
``status.<handler id>`` instead, not in ``status.area``). Every other setting is
Kopf's default (progress and diff-base storage in annotations, Events posted only
for explicit ``kopf.event()`` calls, so none here; no worker limit).

Run (``hack/bench/frameworks.py`` does this; Kopf lives in its own venv, see
``hack/peers/kopf.sh``)::

    KUBECONFIG=K "$(hack/peers/kopf.sh | tail -n1)/bin/kopf" run --standalone \
        --all-namespaces hack/bench/frameworks/kopf_widgets.py

This file imports ``kopf``, which is not a project dependency: it is not part of
the project's type-checked or imported code.
"""

from typing import Any

import kopf

GROUP, VERSION, PLURAL = "bench.example.com", "v1", "widgets"


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def widget(spec: Any, meta: Any, patch: Any, **_: Any) -> None:
    patch.status["area"] = int(spec.get("size", 0)) ** 2
    patch.status["label"] = str(spec.get("color", "")).upper()
    patch.status["observedGeneration"] = meta.get("generation")
