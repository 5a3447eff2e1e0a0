"""``rso_e2e_apps`` imports ``ray``, which only the Ray venv has (tests/support/realray): real Ray
imports it from the pods' ``PYTHONPATH``; pytest must not collect it (``--doctest-modules``)."""

collect_ignore = ["rso_e2e_apps.py"]
