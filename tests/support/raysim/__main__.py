"""``python -m tests.support.raysim``: the simulator's host part
(see :mod:`tests.support.raysim.host`)."""

import sys

from tests.support.raysim import host

sys.exit(host.main())
