"""Repository-wide pytest setup: logs go to stderr (captured per test), never to stdout.

Keeping stdout clean matters for doctests, whose expected output is stdout.
"""

import logging
import sys

import structlog

structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        structlog.dev.ConsoleRenderer(colors=False),
    ],
    wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    # Resolve sys.stderr per logger, so pytest's per-test capture sees the output.
    logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
    cache_logger_on_first_use=False,
)
