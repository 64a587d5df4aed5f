"""The certify pytest plugin (entry point ``pytest11``): ``pytest certify --device cpu|cuda|auto ...``.

Owns the options (one group, see :mod:`certify.options`), the suite markers and the ``check`` marker, the
session engine fixture ``certify_env`` (one engine per session behind the gateway, see
:mod:`certify.session`), the ``certify_record`` fixture (metrics, details, evidence of the current check),
and the collection of check results. Results travel as ``user_properties`` on test reports, so under
pytest-xdist the controlling process sees every worker's results; it alone evaluates (:mod:`certify.evaluate`)
and writes the results, the signed entry and the HTML pages (:mod:`certify.outputs`). Before that it runs the
session-end checks (:func:`certify.registry.at_session_end`: the secrets scan) of every suite the session ran,
after every test, recording each under its check id like any check.

The session's timeline (:mod:`certify.timeline`): every check's call phase, every certify fixture's setup and
teardown and the steps the code inside them times are spans, drained into the report of the phase that paid
for them (``certify_spans``) so they travel with the results; the controller adds its session-end checks and
the CPU over the session and hands the timeline to the outputs.

The plugin is inert for test runs that collect no certification check (the project's own ``tests/``).

This module holds the hooks and fixtures only (pytest-xdist's plugin is the model: thin hooks, the work
elsewhere): what a process keeps is :mod:`certify.state`, result collection :mod:`certify.results`, the engine's
and the machine's turns :mod:`certify.turns`, the session-end checks and the outputs :mod:`certify.session_end`,
a check's recorder :mod:`certify.recorder`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from certify.options import REPORT_ENV, SESSION_ENV, add_options, options_from
from certify.quiet import QuietPhase, TimingRefused, machine_turn
from certify.recorder import Recorder
from certify.registry import SUITES, all_checks
from certify.results import record_report
from certify.session_end import finish
from certify.state import STATE, SUITES_DIR, CertifyState, check_id_of, is_certify_item, resolved_options
from certify.timeline import cpu_sample, drain, record
from certify.turns import FIXTURE_HOLD, PRIVATE_FIXTURES, engine_turn, quiet_limit, setup_holds_engine, turn_dir, uses_session
from harness.contracts.timeline import SpanEngine
from harness.settings import settings

_USED_PRIVATE = pytest.StashKey[bool]()  # a check whose setup or call started or used a private engine/daemon
WAIT_FIXTURES = ("_shared_engine_turn",)  # their setup is a wait for another worker (timeline kind "wait")
UNTIMED_FIXTURES = ("certify_record",)  # a recorder object: nothing to time
_FIXTURE_ENGINES: dict[str, SpanEngine] = {"certify_env": "session", **dict.fromkeys(PRIVATE_FIXTURES, "private")}


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for suite in SUITES:
        config.addinivalue_line("markers", f"{suite}: certification suite {suite}")
    config.addinivalue_line("markers", "check(id): the stable id of the certification check a test implements")
    config.addinivalue_line(
        "markers", "exclusive_engine: changes or measures the shared engine (faults, request log, perf); runs alone"
    )
    config.addinivalue_line(
        "markers", "quiet: its figure is a timing: runs in a quiet phase, the machine to itself (certify.quiet)"
    )
    is_worker = hasattr(config, "workerinput")
    key = settings().certify_session or ""
    if not is_worker and _targets_certify(config):  # the controller fixes what its xdist workers must share
        # a controller started from inside another pytest-xdist worker inherits that worker's id: its spans are
        # the controller's lane (``main``), and its own workers get their ids from xdist
        os.environ.pop("PYTEST_XDIST_WORKER", None)
        key = secrets.token_hex(8)
        os.environ[SESSION_ENV] = key
        os.environ.pop(REPORT_ENV, None)  # one inherited from an outer run is not ours
        os.environ[REPORT_ENV] = str(options_from(config).report_dir)
    config.stash[STATE] = CertifyState(is_worker=is_worker, session_key=key or secrets.token_hex(8))
    config.pluginmanager.register(_ResultCollector(config), "certify-results")
    if not is_worker and _targets_certify(config) and config.getoption("--device") == "cuda":
        _fail_closed(config)


def _targets_certify(config: pytest.Config) -> bool:
    """Whether this invocation names the certify suites: ``pytest certify ...`` in the checkout, or
    ``pytest --pyargs certify ...`` wherever the package is installed."""
    here = SUITES_DIR.parent
    for arg in config.args:
        name = str(arg).split("::", 1)[0]
        path = Path(name).resolve()
        if path == here or here in path.parents:
            return True
        if config.getoption("pyargs") and (name == here.name or name.startswith(f"{here.name}.")):
            return True
    return False


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    certify_items = [item for item in items if is_certify_item(item)]
    if not certify_items:
        return
    declared = all_checks()
    opts = resolved_options(config)
    config.stash[STATE].timing = True
    for item in certify_items:
        cid = check_id_of(item)
        if cid is None or cid not in declared:
            raise pytest.UsageError(
                f"{item.nodeid}: every certification test needs a declared @pytest.mark.check id (got {cid!r})"
            )
        spec = declared[cid]
        item.add_marker(getattr(pytest.mark, spec.suite))
        item.user_properties.append(("certify_check", cid))
        if not spec.applies(str(opts.engine), opts.device):
            why = f": {spec.reason}" if spec.reason else ""
            item.add_marker(pytest.mark.skip(reason=f"{cid} does not apply to engine={opts.engine} device={opts.device}{why}"))


def pytest_sessionstart(session: pytest.Session) -> None:
    state = session.config.stash[STATE]
    if not state.is_worker:
        state.started_at, state.cpu_first = time.time(), cpu_sample()
        from harness.app.daemon_client import daemon_running

        try:
            state.daemon_was_running = daemon_running(options_from(session.config).root) is not None
        except Exception:
            state.daemon_was_running = True


def _fail_closed(config: pytest.Config) -> None:
    """A device that cannot run here (``--device cuda`` without a usable GPU) stops the session before any suite.

    Called from ``pytest_configure`` so it can still keep pytest-xdist from starting workers (its own configure
    runs last); collection and the test loop are then skipped and ``pytest_sessionfinish`` writes the failed entry.
    """
    opts = resolved_options(config)
    if opts.blocked is None:
        return
    config.stash[STATE].blocked = opts.blocked
    if hasattr(config.option, "dist"):
        config.option.dist = "no"
        config.option.tx = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    return True if session.config.stash[STATE].blocked else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    return True if session.config.stash[STATE].blocked else None


class _ResultCollector:
    """Per-config hook holder: test reports (from this process or, under xdist, from the workers)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record_report(self.config.stash[STATE], report)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
    """Time the setup of every fixture the certify package defines (the session engine, references, the perf
    fixture, Harbor's checks, private daemons...) and, once it is set up, its teardown. A module or session
    fixture of a test that uses the session engine holds the engine's turn shared while it is set up."""
    state = request.config.stash[STATE]
    code = getattr(fixturedef.func, "__code__", None)
    if not state.timing or code is None or fixturedef.argname in UNTIMED_FIXTURES or not _certify_file(code.co_filename):
        return (yield)
    holds_engine = setup_holds_engine(fixturedef, request)
    engine = _FIXTURE_ENGINES.get(fixturedef.argname) or ("session" if holds_engine else None)
    with contextlib.ExitStack() as turns:
        # its work holds the machine's turn shared (a quiet phase elsewhere waits for it; one inside converts it)
        turns.enter_context(machine_turn(turn_dir(request.config), exclusive=False))
        if holds_engine:
            turns.enter_context(engine_turn(request.config, exclusive=False))
            FIXTURE_HOLD.append(fixturedef.argname)
            turns.callback(FIXTURE_HOLD.pop)
        start = time.time()  # its own work: the span leaves out the wait for the turns
        try:
            return (yield)
        finally:
            kind = "wait" if fixturedef.argname in WAIT_FIXTURES else "fixture"
            record(kind, fixturedef.argname, start, time.time(), phase="setup", scope=fixturedef.scope, engine=engine)
            if kind == "fixture" and fixturedef.cached_result is not None and fixturedef.cached_result[2] is None:
                # runs first when the fixture is finished (finalizers are popped last-in first-out)
                fixturedef.addfinalizer(lambda: state.teardowns.__setitem__(id(fixturedef), time.time()))


@functools.cache
def _certify_file(filename: str) -> bool:
    """Whether a fixture's function lives in the certify package (the suites included, however pytest imported them)."""
    return SUITES_DIR.parent in Path(filename).resolve().parents


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    start = request.config.stash[STATE].teardowns.pop(id(fixturedef), None)
    if start is not None:
        engine = _FIXTURE_ENGINES.get(fixturedef.argname)
        record("fixture", fixturedef.argname, start, time.time(), phase="teardown", scope=fixturedef.scope, engine=engine)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the spans this phase recorded (and, for the call phase, the check's own span) to its report."""
    report: pytest.TestReport = yield
    cid = check_id_of(item) if is_certify_item(item) else None
    if cid is None:
        return report
    spans = drain()
    if any(s.get("engine") == "private" for s in spans):
        item.stash[_USED_PRIVATE] = True
    if call.when == "call":
        spans.append(record("check", cid, call.start, call.stop, engine=_engine_of(item), keep=False))
    for s in spans:
        s["check"], s["phase"] = s["check"] or cid, call.when
    if spans:
        report.user_properties.append(("certify_spans", spans))
    return report


def _engine_of(item: pytest.Item) -> SpanEngine:
    """The engine a check used: a private one (it used a private daemon, or started a private engine), else the
    session's (it asked for the session environment), else none."""
    names = set(getattr(item, "fixturenames", ()))
    if item.stash.get(_USED_PRIVATE, False) or names & set(PRIVATE_FIXTURES):
        return "private"
    return "session" if "certify_env" in names else "none"


@pytest.fixture(scope="session")
def certify_env(request: pytest.FixtureRequest) -> Iterator[Any]:
    from certify.session import open_session

    config = request.config
    state = config.stash[STATE]
    opts = resolved_options(config)
    worker = str(getattr(config, "workerinput", {}).get("workerid", "main"))
    # the reference needs the model imported but no engine running: the session prepares it before the engine
    references = any(item.get_closest_marker("correctness") is not None for item in request.session.items)
    env = open_session(opts, state.session_key, worker, references=references)
    try:
        yield env
    finally:
        env.close()


_QUIET = pytest.StashKey[QuietPhase]()


@pytest.fixture(autouse=True)
def _shared_engine_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every certification test's turns: the machine's (shared; alone with a quiet phase for a ``quiet`` check,
    whose after-reading :func:`pytest_runtest_call` takes) and then the session engine's (shared, or alone for
    ``exclusive_engine``; none for a check that uses only a private engine)."""
    item = request.node
    if not isinstance(item, pytest.Item) or not is_certify_item(item):
        yield
        return
    config = request.config
    session_engine = uses_session(item)
    exclusive = item.get_closest_marker("exclusive_engine") is not None
    engine = engine_turn(config, exclusive=exclusive) if session_engine else contextlib.nullcontext()
    if item.get_closest_marker("quiet") is None:
        with machine_turn(turn_dir(config), exclusive=False), engine:
            yield
        return
    phase, waited_from = QuietPhase(check_id_of(item) or item.name, quiet_limit(config)), time.time()
    with machine_turn(turn_dir(config), exclusive=True):
        try:
            phase.begin()
            item.stash[_QUIET] = phase
            with engine:
                yield
        finally:
            if _QUIET in item.stash:
                del item.stash[_QUIET]
            phase.close(waited_from)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A ``quiet`` check's after-reading, in its call so a refusal fails the check and drops its figures."""
    result = yield
    phase = item.stash.get(_QUIET, None)
    if phase is None:
        return result
    try:
        phase.finish()
    except TimingRefused:  # its figures go: from this report, and from what later checks aggregate
        names = sorted({k for key, v in item.user_properties if key == "certify_metric" for k in cast("dict[str, Any]", v)})
        item.user_properties[:] = [p for p in item.user_properties if p[0] != "certify_metric"]
        item.user_properties.append(("certify_refused", names))
        raise
    finally:
        item.user_properties.append(("certify_detail", {"quiet_phase": phase.detail()}))
    return result


@pytest.fixture
def certify_record(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(request.node)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash[STATE]
    if state.is_worker or not (state.active or state.blocked):
        return
    finish(session, state)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash[STATE]
    if state.summary:
        terminalreporter.section("hitch certification")
        for line in state.summary:
            terminalreporter.write_line(line)
