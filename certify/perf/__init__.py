"""The one gateway-overhead measurement (spec §15.4): arms, loops, summary, and the TTFT definition.

Used by the perf suite (``certify/suites/test_perf.py``), ``hitch bench overhead`` (``python -m certify.perf``),
``hitch bench load`` and ``hitch bench external`` (the started stack). Modules:

- :mod:`certify.perf.reading`: what a client reads off a response — **the** definitions of TTFT and ITL;
- :mod:`certify.perf.loops`: arms (direct, gateway, optionally the bare reference proxy), the concurrency-1
  loop (requests alternate arm by arm, the first arm rotating per round) and the concurrency-C loop;
- :mod:`certify.perf.summary`: added p50/p95/p99 per round and pooled with bootstrap 95 % intervals
  (:func:`harness.stats.added_intervals`), the §15.4 bound decided on the interval, the printed table;
- :mod:`certify.perf.stack`: the engine (fake or generic-CPU SGLang) + gateway process (+ reference proxy)
  that the benchmarks start;
- :mod:`certify.perf.reference_proxy`: the bare aiohttp pass-through (the Python floor; a benchmark
  instrument, never used to serve runs);
- :mod:`certify.perf.bench`: ``python -m certify.perf``.
"""
