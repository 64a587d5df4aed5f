"""Names the pinned SGLang (0.5.23) accepts for ``--tool-call-parser`` (``sglang.srt.function_call.parser_names``).

A leaf module (it imports only ``typing``): the lock's field type, the importer's choice and the fake engine's
argparse (copied into the fake engine image) share this one list.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["PARALLEL_TOOL_CALL_PARSERS", "SGLANG_TOOL_CALL_PARSERS", "ToolCallParserName"]

# The ``--tool-call-parser`` choices of SGLang 0.5.23 (``sglang.srt.function_call.parser_names``): a lock may
# name only a parser the pinned engine has, and the fake engine refuses any other like SGLang's argparse.
ToolCallParserName = Literal[
    "apertus2509", "beam", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4",
    "deepseekv41", "dots", "glm", "glm45", "glm47", "gpt-oss", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2",
    "ling3", "llama3", "mimo", "minicpm5", "mistral", "muse", "poolside_v1", "pythonic", "qwen", "qwen25",
    "qwen3_coder", "spark25", "step3", "step3p5", "minimax-m2", "minimax-m3", "nanbeige", "trinity", "interns1",
    "hermes", "hunyuan", "gigachat3", "gigachat35", "gemma4", "inkling", "iquest_q1", "response_template",
]  # fmt: skip
SGLANG_TOOL_CALL_PARSERS: tuple[str, ...] = get_args(ToolCallParserName)

# Parsers whose detector (``detect_and_parse``) returns every call it finds in one answer, so a lock naming one
# claims parallel tool calls (spec §10.2): hermes/qwen/qwen25 (each <tool_call> block, or a list inside one),
# llama3 (JSON objects separated by ';'), mistral (the [TOOL_CALLS] array), pythonic (a list of calls). A parser
# enters this set once its 0.5.23 detector was read to do so; a lock naming any other claims one call per turn.
PARALLEL_TOOL_CALL_PARSERS: frozenset[str] = frozenset({"hermes", "qwen", "qwen25", "llama3", "mistral", "pythonic"})
