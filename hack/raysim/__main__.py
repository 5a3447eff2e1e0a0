"""``python -m hack.raysim``: the simulator's host part (see :mod:`hack.raysim.host`)."""

import sys

from hack.raysim import host

sys.exit(host.main())
