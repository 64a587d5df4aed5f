"""``python -m gateway --spec FILE``: see :mod:`gateway.standalone`."""

from gateway.standalone import main

raise SystemExit(main())
