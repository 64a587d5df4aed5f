"""The certification suites' kit: what the suite modules share, imported at module top.

- :mod:`certify.kit.probes`: polls with a deadline, processes, the engine's load, evidence rows, the sealed lock;
- :mod:`certify.kit.requests`: requests through a run's gateway, usage rules, the forced tool call;
- :mod:`certify.kit.answers`: what a well-formed Responses or chat answer is (non-stream and SSE);
- :mod:`certify.kit.streams`: streams a check holds open and closes (what the engine does then);
- :mod:`certify.kit.stack`: a private fake engine behind a private gateway (faults, scripted answers);
- :mod:`certify.kit.daemon`: a private daemon for the checks that kill or refuse an engine;
- :mod:`certify.kit.faults`: where a fault runs and how the client and the evidence see it;
- :mod:`certify.kit.correctness`: token keys, the greedy-parity comparison, answer scoring;
- :mod:`certify.kit.agents`: a scripted fake engine behind a capturing gateway for agent tool loops;
- :mod:`certify.kit.codex`: the Codex checks' reads and the empty-answer diagnosis;
- :mod:`certify.kit.harbor`: the Harbor scenarios the ``agents.harbor`` checks run once per session;
- :mod:`certify.kit.offline_engine`: one engine serving with the network cut (started as the supervisor starts it);
- :mod:`certify.kit.white_box`: the core internals the suites test directly.

The kit is the one place of certify that imports the core below the application layer (an import contract in
``pyproject.toml``): the suites reach the core through it, every other certify module through :mod:`harness.app`.
"""
