"""Logging set-up for operator processes: structlog, configured once.

``configure("json")`` for clusters (one JSON object per line, what log
collectors parse), ``configure("console")`` for people; ``"auto"`` picks
console when stderr is a terminal. Reconcile context (``controller``,
``namespace``, ``name``, ``reconcile_id``) is merged from contextvars into
every line logged during a reconcile.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

__all__ = ["configure"]

Format = Literal["auto", "json", "console"]
Level = Literal["debug", "info", "warning", "error"]


def configure(format: Format = "auto", level: Level = "info") -> None:
    """Configure structlog for the whole process (call once, at start-up)."""
    if format == "auto":
        format = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info
            if format == "json"
            else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
