"""One rule for input errors: every bad option value, malformed --prompt, out-of-range number and parser refusal
exits 2 with ``usage_error`` (or the input's own code), names the option as typed and its choices, and is
refused before anything is admitted or started (no run record, no daemon, no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from harness.app.choice import DEVICE_CHOICES
from harness.cli.options import CHOICES
from harness.contracts.service import EngineName, LauncherName
from harness.lock import ProfileShort
from tests.harness.cli.cli_support import error_json, hitch, nothing_started

TINY = "local/tiny"
MODEL = ("--model", TINY)
RUN = ("run", "--harness", "model-call", "--model", "local/tiny", "--engine", "fake")

# (argv, exit code, error code, the option the message names, did-you-mean)
BAD_INPUTS: list[tuple[tuple[str, ...], int, str, str, str | None]] = [
    (("local", "lock", "local/tiny", "--device", "gpu"), 2, "usage_error", "--device", "cuda"),
    (("local", "lock", "local/tiny", "--device", "metal"), 2, "usage_error", "--device", None),
    (("local", "prepare", "local/tiny", "--device", "cpux"), 2, "usage_error", "--device", "cpu"),
    (("local", "serve", "local/tiny", "--device", "tpu"), 2, "usage_error", "--device", None),
    (("local", "doctor", "--device", "cudaa"), 2, "usage_error", "--device", "cuda"),
    (("local", "prepare", "local/tiny", "--engine", "fak"), 2, "usage_error", "--engine", "fake"),
    (("local", "serve", "local/tiny", "--launcher", "docker"), 2, "usage_error", "--launcher", "oci"),
    (("local", "lock", "local/tiny", "--profile", "fast"), 2, "usage_error", "--profile", None),
    (("local", "lock", "local/tiny", "--context", "0"), 2, "usage_error", "--context", None),
    (("run", "--harness", "chat", "--model", "local/tiny", "--prompt", "x"), 2, "usage_error", "--harness", None),
    (("run", "--harness", "codx", "--model", "local/tiny", "--prompt", "x"), 2, "usage_error", "--harness", "codex"),
    ((*RUN, "--device", "gpu", "--prompt", "x"), 2, "usage_error", "--device", "cuda"),
    ((*RUN, "--device", "cpu", "--prompt", "[1"), 2, "usage_error", "--prompt", None),
    ((*RUN, "--device", "cpu", "--prompt", "[]"), 2, "usage_error", "--prompt", None),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--max-output-tokens", "0"), 2, "usage_error", "--max-output-tokens", None),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--max-output-tokens", "abc"), 2, "usage_error", "--max-output-tokens", None),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--deadline-s", "0"), 2, "usage_error", "--deadline-s", None),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--capture", "ful"), 2, "usage_error", "--capture", "full"),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--capture-max-bytes", "0"), 2, "usage_error", "--capture-max-bytes", None),
    ((*RUN, "--device", "cpu", "--prompt", "x", "--no-such-flag"), 2, "usage_error", "--no-such-flag", None),
    (("eval", "harbor", "run", "fixtures/harbor_tasks", *MODEL, "--device", "gpu"), 2, "usage_error", "--device", "cuda"),
    (("local", "lock"), 2, "usage_error", "model", None),
    (("run", "--harness", "model-call", "--model", "local/tny", "--prompt", "x"), 2, "local_model_not_found", "tny", TINY),
    (("models", "inspect", "tiny"), 2, "local_model_not_found", "tiny", "local/tiny"),
]


@pytest.mark.parametrize(("argv", "exit_code", "code", "option", "did_you_mean"), BAD_INPUTS, ids=lambda v: str(v))
def test_bad_input_exits_2_with_its_code_and_starts_nothing(
    tiny_root: Path, argv: tuple[str, ...], exit_code: int, code: str, option: str, did_you_mean: str | None
) -> None:
    err = error_json(hitch(tiny_root, *argv, "--json"), exit_code)
    assert err["code"] == code and err["category"] == "input"
    assert option.lower() in err["message"].lower()
    assert "ServiceAsk" not in err["message"] and "literal_error" not in err["message"]
    if did_you_mean is not None:
        assert f"did you mean {did_you_mean}" in err["message"]
    nothing_started(tiny_root)


def test_a_bad_choice_names_every_valid_one_in_json_and_in_human_lines(tiny_root: Path) -> None:
    err = error_json(hitch(tiny_root, "local", "lock", "local/tiny", "--device", "gpu", "--json"), 2)
    assert err["details"] == {"option": "--device", "value": "gpu", "choices": ["auto", "cpu", "cuda"], "did_you_mean": "cuda"}
    human = hitch(tiny_root, "local", "lock", "local/tiny", "--device", "gpu")
    assert human.returncode == 2 and human.stdout == ""
    first = "error[usage_error]: --device gpu is not known; choose auto|cpu|cuda (did you mean cuda?)"
    assert human.stderr.splitlines()[0] == first
    assert "  choices: auto, cpu, cuda" in human.stderr.splitlines()
    details = "\n".join(human.stderr.splitlines()[1:])
    assert "[" not in details and "{" not in details  # no Python reprs of lists or dicts


def test_the_checked_choices_are_the_contracts() -> None:
    assert CHOICES["device"][1] == DEVICE_CHOICES
    assert set(CHOICES["engine"][1]) == set(get_args(EngineName))
    assert set(CHOICES["launcher"][1]) == set(get_args(LauncherName))
    assert set(CHOICES["profile"][1]) == set(get_args(ProfileShort))
