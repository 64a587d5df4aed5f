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
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from certify.evaluate import CheckResult
from certify.options import REPORT_ENV, SESSION_ENV, CertifyOptions, add_options, choose_engine, options_from
from certify.quiet import QuietLimit, QuietPhase, TimingRefused, held_turn, machine_turn, parse_limit, quiet_phase
from certify.recorder import EndRecorder, Recorder, shown_status
from certify.registry import SUITES, Check, all_checks, session_end_checks
from certify.secrets_scan import forget
from certify.timeline import CpuSample, build_timeline, cpu_sample, cpu_usage, drain, record
from harness.contracts.timeline import SpanEngine
from harness.settings import settings

SUITES_DIR = Path(__file__).resolve().parent / "suites"
_STATE = pytest.StashKey["CertifyState"]()
_USED_PRIVATE = pytest.StashKey[bool]()  # a check whose setup or call started or used a private engine/daemon
PRIVATE_FIXTURES = ("private_daemon",)  # fixtures that hand a check a private daemon and its engine
# fixtures that take the session engine's turn (or a quiet phase) themselves, behind a file mutex of their own:
# their setup must not hold the engine shared meanwhile (another worker waiting on that mutex would hold it too)
OWN_TURN_FIXTURES = ("overhead", "inside", "cancel")
WAIT_FIXTURES = ("_shared_engine_turn",)  # their setup is a wait for another worker (timeline kind "wait")
UNTIMED_FIXTURES = ("certify_record",)  # a recorder object: nothing to time
_FIXTURE_ENGINES: dict[str, SpanEngine] = {"certify_env": "session", **dict.fromkeys(PRIVATE_FIXTURES, "private")}


@dataclass
class CertifyState:
    is_worker: bool
    session_key: str
    daemon_was_running: bool = True
    results: dict[str, CheckResult] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # <check>/<name> -> EvidenceFileV1 fields
    active: bool = False
    resolved: CertifyOptions | None = None
    summary: list[str] = field(default_factory=list)
    blocked: str | None = None  # why the session stopped before its suites (see _fail_closed)
    timing: bool = False  # this process runs certification checks: their fixtures are timed
    started_at: float = 0.0  # epoch seconds of the controller's session start
    cpu_first: CpuSample | None = None
    spans: list[dict[str, Any]] = field(default_factory=list)
    teardowns: dict[int, float] = field(default_factory=dict)  # id(fixturedef) -> its teardown's start
    refused: set[str] = field(default_factory=set)  # metric names of timings a quiet phase refused


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
    config.stash[_STATE] = CertifyState(is_worker=is_worker, session_key=key or secrets.token_hex(8))
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


def _is_certify_item(item: pytest.Item) -> bool:
    return SUITES_DIR in Path(str(item.path)).resolve().parents


def check_id_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("check")
    if marker is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    return str(marker.args[0]).format(**params)


def resolved_options(config: pytest.Config) -> CertifyOptions:
    state = config.stash[_STATE]
    if state.resolved is None:
        state.resolved = choose_engine(options_from(config))
    return state.resolved


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    certify_items = [item for item in items if _is_certify_item(item)]
    if not certify_items:
        return
    declared = all_checks()
    opts = resolved_options(config)
    config.stash[_STATE].timing = True
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
    state = session.config.stash[_STATE]
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
    config.stash[_STATE].blocked = opts.blocked
    if hasattr(config.option, "dist"):
        config.option.dist = "no"
        config.option.tx = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    return True if session.config.stash[_STATE].blocked else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    return True if session.config.stash[_STATE].blocked else None


class _ResultCollector:
    """Per-config hook holder: test reports (from this process or, under xdist, from the workers)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record_report(self.config.stash[_STATE], report)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
    """Time the setup of every fixture the certify package defines (the session engine, references, the perf
    fixture, Harbor's checks, private daemons...) and, once it is set up, its teardown. A module or session
    fixture of a test that uses the session engine holds the engine's turn shared while it is set up."""
    state = request.config.stash[_STATE]
    code = getattr(fixturedef.func, "__code__", None)
    if not state.timing or code is None or fixturedef.argname in UNTIMED_FIXTURES or not _certify_file(code.co_filename):
        return (yield)
    holds_engine = _setup_holds_engine(fixturedef, request)
    engine = _FIXTURE_ENGINES.get(fixturedef.argname) or ("session" if holds_engine else None)
    with contextlib.ExitStack() as turns:
        # its work holds the machine's turn shared (a quiet phase elsewhere waits for it; one inside converts it)
        turns.enter_context(machine_turn(_turn_dir(request.config), exclusive=False))
        if holds_engine:
            turns.enter_context(engine_turn(request.config, exclusive=False))
            _FIXTURE_HOLD.append(fixturedef.argname)
            turns.callback(_FIXTURE_HOLD.pop)
        start = time.time()  # its own work: the span leaves out the wait for the turns
        try:
            return (yield)
        finally:
            kind = "wait" if fixturedef.argname in WAIT_FIXTURES else "fixture"
            record(kind, fixturedef.argname, start, time.time(), phase="setup", scope=fixturedef.scope, engine=engine)
            if kind == "fixture" and fixturedef.cached_result is not None and fixturedef.cached_result[2] is None:
                # runs first when the fixture is finished (finalizers are popped last-in first-out)
                fixturedef.addfinalizer(lambda: state.teardowns.__setitem__(id(fixturedef), time.time()))


_FIXTURE_HOLD: list[str] = []  # the fixture whose setup holds the engine's turn in this process (the hook above)


def _setup_holds_engine(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> bool:
    """Whether this fixture's setup holds the session engine shared: a module or session fixture (set up before
    the test's own turn, below, is taken), for a certify test that uses the session engine, unless it hands out a
    private daemon or takes its turns itself."""
    if fixturedef.scope == "function" or fixturedef.argname in (*PRIVATE_FIXTURES, *OWN_TURN_FIXTURES):
        return False
    item = getattr(request, "_pyfuncitem", None)
    return isinstance(item, pytest.Item) and _is_certify_item(item) and _uses_session(item)


def _uses_session(item: pytest.Item) -> bool:
    """A private daemon's checks reach the session's engine only when they ask for the session itself."""
    names = set(getattr(item, "fixturenames", ()))
    asked = set(getattr(getattr(item, "_fixtureinfo", None), "argnames", ()))  # the test's own arguments
    return "certify_env" in asked or not names & set(PRIVATE_FIXTURES)


@functools.cache
def _certify_file(filename: str) -> bool:
    """Whether a fixture's function lives in the certify package (the suites included, however pytest imported them)."""
    return SUITES_DIR.parent in Path(filename).resolve().parents


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    start = request.config.stash[_STATE].teardowns.pop(id(fixturedef), None)
    if start is not None:
        engine = _FIXTURE_ENGINES.get(fixturedef.argname)
        record("fixture", fixturedef.argname, start, time.time(), phase="teardown", scope=fixturedef.scope, engine=engine)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the spans this phase recorded (and, for the call phase, the check's own span) to its report."""
    report: pytest.TestReport = yield
    cid = check_id_of(item) if _is_certify_item(item) else None
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


def record_report(state: CertifyState, report: pytest.TestReport) -> None:
    cid = next((v for k, v in report.user_properties if k == "certify_check"), None)
    if cid is None:
        return
    state.active = True
    for key, value in report.user_properties:
        if key == "certify_spans":
            state.spans.extend(cast("list[dict[str, Any]]", value))
    status: str | None = None
    if report.when == "call":
        status = "passed" if report.passed else "skipped" if report.skipped else "failed"
    elif report.when == "setup" and not report.passed:
        status = "skipped" if report.skipped else "failed"
    elif report.when == "teardown" and report.failed:
        status = "failed"
    if status is None:
        return
    details: dict[str, Any] = {}
    for key, value in report.user_properties:
        if key == "certify_refused":
            state.refused.update(cast("list[str]", value))
    for key, value in report.user_properties:
        if key == "certify_detail":
            details.update(cast("dict[str, Any]", value))
        elif key == "certify_metric":
            state.metrics.update(_unrefused(state.refused, cast("dict[str, Any]", value)))
        elif key == "certify_evidence":
            state.evidence.update(cast("dict[str, dict[str, Any]]", value))
    status = shown_status(status, details)
    if status not in ("passed", "not_applicable"):
        details["reason"] = _reason(report)
    result = CheckResult(str(cid), status, float(report.duration), details)  # type: ignore[arg-type]
    previous = state.results.get(result.id)
    state.results[result.id] = result if previous is None else previous.merge(result)


def _unrefused(refused: set[str], metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics less the figures of refused timings, also inside a suite's aggregate (``_lifecycle``...)."""
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        if name in refused:
            continue
        if name.startswith("_") and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in refused}
        out[name] = value
    return out


def _reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:500]
    text = getattr(report, "longreprtext", "") or ""
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return ("\n".join(lines[:8]) or text[-500:])[:1000]


@pytest.fixture(scope="session")
def certify_env(request: pytest.FixtureRequest) -> Iterator[Any]:
    from certify.session import open_session

    config = request.config
    state = config.stash[_STATE]
    opts = resolved_options(config)
    worker = str(getattr(config, "workerinput", {}).get("workerid", "main"))
    # the reference needs the model imported but no engine running: the session prepares it before the engine
    references = any(item.get_closest_marker("correctness") is not None for item in request.session.items)
    env = open_session(opts, state.session_key, worker, references=references)
    try:
        yield env
    finally:
        env.close()


def _turn_dir(config: pytest.Config) -> Path | None:
    """Where the session's processes take turns (its key folder), or None outside xdist."""
    if not hasattr(config, "workerinput"):
        return None
    from certify.session import session_key_dir

    return session_key_dir(resolved_options(config), config.stash[_STATE].session_key)


@contextlib.contextmanager
def engine_turn(config: pytest.Config, *, exclusive: bool) -> Iterator[None]:
    """Under xdist, hold the session engine shared or alone among the session's processes; a no-op otherwise.

    Every certify test holds it shared while it runs (autouse fixture below) unless it uses only a private
    engine; a test marked ``exclusive_engine``, or a fixture that measures or changes the shared engine, holds it
    alone: a fault set on the shared fake engine, its request log, or a latency measurement is never disturbed by
    another worker's check. A module or session fixture of a test that uses the session engine holds it shared
    while it is set up (:func:`pytest_fixture_setup`: its requests reach that engine too), unless it is one of
    :data:`OWN_TURN_FIXTURES`, which take their turns themselves. Taken after the machine's turn
    (:func:`quiet_turn`), never before it.
    """
    if _FIXTURE_HOLD:
        raise RuntimeError(
            f"fixture {_FIXTURE_HOLD[-1]} takes the engine's turn itself while its setup holds it shared: "
            "name it in certify.plugin.OWN_TURN_FIXTURES"
        )
    with held_turn(_turn_dir(config), "engine", exclusive=exclusive):
        yield


def quiet_limit(config: pytest.Config) -> QuietLimit:
    return parse_limit(resolved_options(config).quiet_load, os.cpu_count() or 1)


@contextlib.contextmanager
def quiet_turn(config: pytest.Config, name: str) -> Iterator[QuietPhase]:
    """A fixture's timing as a quiet phase (:func:`certify.quiet.quiet_phase`): the machine alone, settled
    before, read after; :class:`~certify.quiet.TimingRefused` when it was loaded."""
    if _FIXTURE_HOLD:
        raise RuntimeError(
            f"fixture {_FIXTURE_HOLD[-1]} asks for the machine alone while its setup holds the engine shared: "
            "name it in certify.plugin.OWN_TURN_FIXTURES"
        )
    with quiet_phase(name, quiet_limit(config), _turn_dir(config)) as phase:
        yield phase


_QUIET = pytest.StashKey[QuietPhase]()


@pytest.fixture(autouse=True)
def _shared_engine_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every certification test's turns: the machine's (shared; alone with a quiet phase for a ``quiet`` check,
    whose after-reading :func:`pytest_runtest_call` takes) and then the session engine's (shared, or alone for
    ``exclusive_engine``; none for a check that uses only a private engine)."""
    item = request.node
    if not isinstance(item, pytest.Item) or not _is_certify_item(item):
        yield
        return
    config = request.config
    uses_session = _uses_session(item)
    exclusive = item.get_closest_marker("exclusive_engine") is not None
    engine = engine_turn(config, exclusive=exclusive) if uses_session else contextlib.nullcontext()
    if item.get_closest_marker("quiet") is None:
        with machine_turn(_turn_dir(config), exclusive=False), engine:
            yield
        return
    phase, waited_from = QuietPhase(check_id_of(item) or item.name, quiet_limit(config)), time.time()
    with machine_turn(_turn_dir(config), exclusive=True):
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


def run_session_end_checks(state: CertifyState, opts: CertifyOptions, checks: list[tuple[Check, Any]]) -> list[str]:
    """Run the session-end checks of every suite that has a result in this session (a run that selected none
    of a suite's tests does not run its session-end checks either); their results join ``state.results``.
    The session's secrets ledger is removed afterwards whatever ran. Returns a line per failed check."""
    from certify.session import SessionEnd, secrets_ledger

    ledger = secrets_ledger(opts, state.session_key)
    session_file = opts.report_dir / "session.json"
    facts: dict[str, Any] = json.loads(session_file.read_text()) if session_file.is_file() else {}
    end = SessionEnd(opts, facts, ledger)
    ran = {cid.split(".", 1)[0] for cid in state.results}
    failed: list[str] = []
    try:
        for spec, fn in checks:
            if spec.suite not in ran:
                continue
            recorder = EndRecorder()
            started, wall_start = time.monotonic(), time.time()
            status = "passed"
            if not spec.applies(str(opts.engine), opts.device):
                why = f": {spec.reason}" if spec.reason else ""
                status = "skipped"
                recorder.details["reason"] = f"{spec.id} does not apply to engine={opts.engine} device={opts.device}{why}"
            else:
                try:
                    fn(end, recorder)
                except Exception as exc:  # a failed assertion, or a crash of the check: the check fails
                    status = "failed"
                    recorder.details["reason"] = f"{type(exc).__name__}: {exc}"[:1000]
                    failed.append(f"{spec.id} (at session end) failed: {recorder.details['reason']}")
            status = shown_status(status, recorder.details)
            state.metrics.update(recorder.metrics)
            state.spans.append(
                record("check", spec.id, wall_start, time.time(), phase="session_end", check=spec.id, engine="none", keep=False)
            )
            result = CheckResult(spec.id, status, time.monotonic() - started, recorder.details)  # type: ignore[arg-type]
            previous = state.results.get(spec.id)
            state.results[spec.id] = result if previous is None else previous.merge(result)
    finally:
        forget(ledger)
    return failed


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash[_STATE]
    if state.is_worker or not (state.active or state.blocked):
        return
    from certify.outputs import finish_session

    started = time.monotonic()
    opts = resolved_options(session.config)
    if state.blocked:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    end_failures: list[str] = []
    try:
        if not state.blocked:
            end_failures = run_session_end_checks(state, opts, session_end_checks())
            if end_failures and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED  # as a failed test would
        timeline = build_timeline(
            state.started_at, time.time(), [*state.spans, *drain()], cpu_usage(state.cpu_first, cpu_sample())
        )
        evaluation, state.summary = finish_session(
            opts,
            state.results,
            state.metrics,
            state.evidence,
            state.daemon_was_running,
            session_error=state.blocked,
            timeline=timeline,
        )
        if state.blocked:  # one clear line first; the "did not run" reasons of every check say nothing more
            state.summary = [f"STOPPED before the suites: {state.blocked}"] + [
                line for line in state.summary if not line.startswith("  - ")
            ]
        if evaluation.level == "failed" and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a failed level never exits 0
        state.summary = end_failures + state.summary
    except Exception as exc:  # the run's outputs are part of its verdict: a failure here fails the session
        import traceback

        state.summary = [f"writing the certification outputs failed: {type(exc).__name__}: {exc}", traceback.format_exc()]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    state.summary.append(f"outputs written in {time.monotonic() - started:.1f} s")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash[_STATE]
    if state.summary:
        terminalreporter.section("hitch certification")
        for line in state.summary:
            terminalreporter.write_line(line)
