"""Locust load benchmark: gateway vs direct under the same schedule.

``hitch bench load`` runs ``python -m certify.load`` (:mod:`certify.load.bench`), which starts the target
stack (the fake engine or SGLang behind our gateway, or takes running endpoints), then runs one locust
process per target, :mod:`certify.load.runner`, with the same schedule, and writes the CSVs and
``summary.json``. Only the runner imports locust: locust monkey-patches the standard library with gevent
on import, so it never loads in the hitch process, the orchestrator, or pytest.

Modules: :mod:`~certify.load.schedule` (options, prompts, request bodies), :mod:`~certify.load.sse`
(stream probe: TTFT and inter-token latency), :mod:`~certify.load.runner` (locust), :mod:`~certify.load.summary`
(summary.json and the side-by-side table), :mod:`~certify.load.bench` (targets and the sequence).
"""
