"""The certification suites' kit: what the suite modules share, imported at module top.

- :mod:`certify.kit.stack`: private daemons and private fake-engine stacks for destructive checks, raw streams;
- :mod:`certify.kit.requests`: requests through a run's gateway, usage rules, a scripted private gateway;
- :mod:`certify.kit.faults`: where a fault runs and how the client and the evidence see it;
- :mod:`certify.kit.correctness`: token keys, the greedy-parity comparison, answer scoring;
- :mod:`certify.kit.agents`: a scripted fake engine behind a capturing gateway for agent tool loops.
"""
