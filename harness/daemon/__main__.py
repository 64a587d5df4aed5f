"""``python -m harness.daemon``: the daemon process (see :mod:`harness.daemon.main`)."""

import sys

from harness.daemon.main import main

sys.exit(main())
