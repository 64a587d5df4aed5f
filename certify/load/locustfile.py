"""The load user for locust's own command line, for distributed runs (master + workers across machines).

``hitch bench load`` runs locust in one process per target; past what one machine can generate, run
locust's master and workers with this file instead (README, "Load testing"). The user is the same
SSE-aware one as :mod:`certify.load.runner` (TTFT and ITL as ``SSE ttft`` / ``SSE itl`` stats entries),
configured by environment variables, which the master and every worker need alike:

- ``HITCH_LOAD_BASE_URL`` — the target's base URL, ending in ``/v1`` (gateway run or engine);
- ``HITCH_LOAD_TOKEN_FILE`` — the file holding its bearer token (run token or engine key), 0600;
- ``HITCH_LOAD_MODEL`` — the model name to send;
- optional ``HITCH_LOAD_API`` (chat | responses), ``HITCH_LOAD_STREAM`` (1 | 0), ``HITCH_LOAD_MAX_TOKENS``,
  ``HITCH_LOAD_SEED``, ``HITCH_LOAD_NAME`` (the label, default ``gateway``).

Users, spawn rate and run time come from locust's own ``-u``, ``-r`` and ``-t``. Bodies are sent as the
caller's (no lock policy applied).
"""

from __future__ import annotations

import json

from certify.load.runner import make_user
from certify.load.schedule import PROMPTS, TargetPlan, caller_body
from harness.app.load_schedule import LoadSchedule
from harness.settings import env_name, settings

__all__ = ["LoadUser"]


def _plan() -> tuple[TargetPlan, str]:
    env = settings()
    needed = {"load_base_url": env.load_base_url, "load_token_file": env.load_token_file, "load_model": env.load_model}
    missing = [env_name(field) for field, value in needed.items() if value is None]
    if env.load_base_url is None or env.load_token_file is None or env.load_model is None:
        raise SystemExit(f"certify/load/locustfile.py needs {', '.join(missing)} (see its docstring)")
    # users/spawn rate/run time are locust's own options; the schedule here only shapes the bodies.
    schedule = LoadSchedule(
        users=1,
        spawn_rate=1.0,
        run_time_s=1.0,
        seed=env.load_seed,
        max_tokens=env.load_max_tokens,
        api=env.load_api,
        stream=env.load_stream,
    )
    token_file = str(env.load_token_file)
    bodies = [json.dumps(caller_body(schedule, env.load_model, p)) for p in PROMPTS]
    plan = TargetPlan(env.load_name, env.load_base_url, token_file, bodies, schedule)
    with open(token_file) as f:
        return plan, f.read().strip()


LoadUser = make_user(*_plan())
