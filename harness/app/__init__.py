"""The application layer: what every entry point (the CLI, the daemon, the certify session, ``hitch bench``,
``hitch eval``) calls, so none of them assembles the core itself (map: ``docs/architecture.md``).

- ``choice.py``: the one rule for the device, engine, launcher and runtime (``resolve_choice``);
- ``requests.py``: one strict model per daemon route body; ``daemon_client.py``: the way into a root's daemon;
- ``service.py``: prepare a service (the runtime made ready, the image, the requests naming it);
- ``runs.py``, ``run_identity.py``, ``run_store.py``: open and end a run, its idempotency, its durable record;
- ``profiles.py``: the harness compatibility profiles every harness is admitted by;
- ``models.py``, ``load_schedule.py``, ``engine_preview.py``: a model imported once, a load benchmark's
  schedule, the command line a lock compiles to.

Its modules are imported by name (``from harness.app.choice import resolve_choice``): nothing is re-exported
here, so an entry point loads only what it uses.
"""
