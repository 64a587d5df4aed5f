"""The one settings object: every environment variable hitch reads is declared in ``harness.settings``, read
there, typed, and nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import resolve_root
from harness.settings import Secret, declared, effective_settings, env_name, settings

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("harness", "gateway", "certify", "catalog", "reports", "scripts")


def test_values_are_typed_and_an_empty_value_is_unset(tmp_path: Path) -> None:
    env = {"HITCH_ROOT": "", "HITCH_REQUIRE_SGLANG": "yes", "HITCH_REQUIRE_DOCKER": "0", "HITCH_LOAD_STREAM": "0"}
    got = settings({**env, "HITCH_CODEX_PREFIX": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")})
    assert got.root is None and got.hitch_root == tmp_path / "data" / "hitch"
    assert got.requires("sglang") and not got.requires("docker") and not got.requires("harbor")
    assert got.load_stream is False and got.load_api == "chat" and got.codex_prefix == tmp_path
    assert settings({"HITCH_ROOT": str(tmp_path / "r")}).hitch_root == tmp_path / "r"


@pytest.mark.parametrize(
    ("name", "value"), [("HITCH_LOAD_SEED", "seven"), ("HITCH_LOAD_API", "completions"), ("HITCH_LOAD_MAX_TOKENS", "1.5")]
)
def test_a_malformed_value_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(HitchError) as exc:
        settings({name: value})
    assert exc.value.code == "usage_error" and exc.value.details == {"variable": name}
    assert name in exc.value.message


def test_a_secret_is_masked_in_the_view_and_in_the_error() -> None:
    secret = "s3cret-" + "x" * 20
    view = {s["name"]: s for s in effective_settings({"HITCH_LOCAL_MODEL_TOKEN": secret})}
    assert view["HITCH_LOCAL_MODEL_TOKEN"]["value"] == "***" and secret not in repr(view)
    token = settings({"HITCH_LOCAL_MODEL_TOKEN": secret}).local_model_token
    assert isinstance(token, Secret) and token.reveal() == secret
    assert secret not in repr(settings({"HITCH_LOCAL_MODEL_TOKEN": secret}))


def test_the_root_follows_the_environment_at_each_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env_name("root"), str(tmp_path / "one"))
    assert resolve_root() == tmp_path / "one"
    monkeypatch.setenv(env_name("root"), str(tmp_path / "two"))
    assert resolve_root() == tmp_path / "two" and resolve_root(tmp_path / "given") == tmp_path / "given"


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``os.environ.get(NAME)``, ``os.environ[NAME]`` (not as an assignment target) and ``os.getenv(NAME)``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            target = ast.unparse(node.func)
            if target in ("os.environ.get", "os.getenv", "environ.get"):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ast.unparse(node.value) == "os.environ":
            key = node.slice
        if key is not None:
            found.append((node.lineno, ast.unparse(key)))
    return found


def test_no_module_reads_a_declared_variable_from_the_environment_itself() -> None:
    names = {var.name for var in declared().values()}
    offenders = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "harness" / "settings.py":
                continue
            for line, key in _environ_reads(ast.parse(path.read_text(encoding="utf-8"))):
                literal = key.strip("'\"")
                if literal in names or literal.startswith("HITCH_") or "_ENV" in key:
                    offenders.append(f"{path.relative_to(REPO)}:{line}: {key}")
    assert not offenders, "read these through harness.settings.settings():\n" + "\n".join(offenders)
