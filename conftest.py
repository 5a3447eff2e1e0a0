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
        # Plain tracebacks, as the manager logs them (runtime.log): the default (rich, with
        # every frame's locals) renders thousands of lines per failed reconcile, which
        # took seconds each and shifted the timing of retries under test.
        structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        ),
    ],
    wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
    # Resolve sys.stderr per logger, so pytest's per-test capture sees the output.
    logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
    cache_logger_on_first_use=False,
)
