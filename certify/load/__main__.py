"""``python -m certify.load``: the load benchmark (see :mod:`certify.load.bench`)."""

from certify.load.bench import main

raise SystemExit(main())
