from certify.perf.bench import main

raise SystemExit(main())
