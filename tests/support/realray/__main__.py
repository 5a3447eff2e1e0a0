"""``python -m tests.support.realray reap``: remove the pod namespaces of harnesses that died."""

import sys

from tests.support import realray

if sys.argv[1:] != ["reap"]:
    print("usage: python -m tests.support.realray reap", file=sys.stderr)
    sys.exit(2)
for line in realray.reap():
    print(line)
