"""Logging set-up for operator processes: structlog and stdlib logging, configured once.

``configure("json")`` for clusters, ``configure("console")`` for people;
``"auto"`` picks console when stderr is a terminal. Either way:

- **Everything goes through one pipeline**: structlog loggers
  (``structlog.get_logger("runtime.controller")``) and stdlib loggers (aiohttp,
  asyncio, kubernetes-asyncio, a user's library) are rendered by the same
  processors into one stream on stderr. In JSON mode every line is exactly one
  JSON object with ``event``, ``level``, ``logger`` (the logger's name) and
  ``timestamp``; a logged exception is a plain-text traceback in its
  ``exception`` field, never extra lines.
- Reconcile context (``controller``, ``namespace``, ``name``, ``reconcile_id``)
  is merged from contextvars into every line logged during a reconcile.
- ``level`` filters both: structlog loggers drop lower levels before any
  processing (cheap), and the stdlib root logger is set to the same level.
- Console mode prints **plain** Python tracebacks (``better-exceptions`` or
  ``rich`` pretty-printing costs tens of milliseconds per logged failure, which
  a controller failing for thousands of keys cannot afford).

- ``file=`` also writes every line to a file, in its own format (``file_format``,
  JSON by default), rotated at 500 MB with 10 old files kept (KubeRay's
  ``--log-file-path``). Both outputs then go through the stdlib handlers, which
  costs more per line than stderr alone: use it where the file is needed.

Calling :func:`configure` again replaces the previous set-up (no duplicated
handlers).
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from typing import Literal, TextIO

import structlog

__all__ = ["configure"]

Format = Literal["auto", "json", "console"]
Level = Literal["debug", "info", "warning", "error"]

_HANDLER_NAME = "runtime.log"
_FILE_HANDLER_NAME = "runtime.log.file"
_FILE_MAX_BYTES = 500 * 1024 * 1024
_FILE_BACKUPS = 10


def configure(
    format: Format = "auto",
    level: Level = "info",
    *,
    file: str | os.PathLike[str] | None = None,
    file_format: Literal["json", "console"] = "json",
) -> None:
    """Configure structlog and stdlib logging for the whole process (see the module docstring).

    ``file``: also write every line there, as ``file_format`` (``OSError`` when it
    cannot be opened)."""
    if format == "auto":
        format = "console" if sys.stderr.isatty() else "json"
    numeric_level = getattr(logging, level.upper())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(_formatter(shared, _renderers(format, sys.stderr.isatty())))
    handlers: list[logging.Handler] = [handler]
    if file is not None:
        to_file = logging.handlers.RotatingFileHandler(
            file, maxBytes=_FILE_MAX_BYTES, backupCount=_FILE_BACKUPS, encoding="utf-8"
        )
        to_file.set_name(_FILE_HANDLER_NAME)
        to_file.setFormatter(_formatter(shared, _renderers(file_format, False)))
        handlers.append(to_file)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() in (_HANDLER_NAME, _FILE_HANDLER_NAME)]:
        root.removeHandler(old)
        old.close()
    for new in handlers:
        root.addHandler(new)
    root.setLevel(numeric_level)
    if file is not None:
        # Two outputs, two renderings: structlog hands its events to the stdlib handlers.
        structlog.configure(
            processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
            logger_factory=structlog.stdlib.LoggerFactory(),
            cache_logger_on_first_use=True,
        )
        return
    # structlog loggers render straight to stderr (a stdlib round trip per line would
    # more than double the cost of a log call); stdlib records take the handler above.
    stream = sys.stderr
    structlog.configure(
        processors=[*shared, *_renderers(format, sys.stderr.isatty())],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=lambda *args: _NamedWriteLogger(stream, str(args[0]) if args else ""),
        cache_logger_on_first_use=True,
    )


def _renderers(format: str, colors: bool) -> list[structlog.typing.Processor]:
    if format == "json":
        return [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    return [
        structlog.dev.ConsoleRenderer(
            colors=colors, exception_formatter=structlog.dev.plain_traceback
        )
    ]


def _formatter(
    shared: list[structlog.typing.Processor], final: list[structlog.typing.Processor]
) -> structlog.stdlib.ProcessorFormatter:
    return structlog.stdlib.ProcessorFormatter(
        # Records from stdlib loggers get the same fields structlog's get before rendering.
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *final],
    )


class _NamedWriteLogger(structlog.WriteLogger):
    """A structlog ``WriteLogger`` that knows its name (for ``add_logger_name``)."""

    def __init__(self, file: TextIO, name: str) -> None:
        super().__init__(file)
        self.name = name
