"""Which SGLang tool-call parser reads the tool calls a chat template's model writes.

SGLang turns generated text into structured ``tool_calls`` / ``function_call`` items only through a
``--tool-call-parser``; the parser must match the format the model was trained to emit, which its chat template
shows (the tool-call markup it renders, or its family's framing). Read from the template text at import; an
operator overrides it at ``hitch models add --tool-call-parser``.
"""

from __future__ import annotations

from typing import get_args

from harness.errors import HitchError
from harness.sglang_parsers import SGLANG_TOOL_CALL_PARSERS, ToolCallParserName

__all__ = ["NO_TOOL_CALL_PARSER", "resolve_tool_call_parser", "tool_call_parser_for"]

# Given at `hitch models add` to say the model has no tool-call format (its locks then claim no tool calls).
NO_TOOL_CALL_PARSER = "none"

# (marker in the template, parser), first match wins: explicit tool-call markup before a family's framing.
_RULES: tuple[tuple[str, ToolCallParserName], ...] = (
    ("<tool_call>", "hermes"),  # Hermes / Qwen2 markup: <tool_call>{"name": .., "arguments": ..}</tool_call>
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3"),
    ("<|start_header_id|>", "llama3"),  # Llama 3 family: a bare JSON object {"name": .., "parameters": ..}
    # ChatML (SmolLM2, Qwen, Hermes): the family's tool convention is Hermes' <tool_call> block, which SGLang's
    # hermes parser reads whether the block holds one call or a list (SmolLM2's training format).
    ("<|im_start|>", "hermes"),
)


def tool_call_parser_for(template: str) -> ToolCallParserName | None:
    """The parser for the template's family; None when it shows no format this table knows."""
    for marker, parser in _RULES:
        if marker in template:
            return parser
    return None


def resolve_tool_call_parser(derived: ToolCallParserName | None, given: str | None) -> ToolCallParserName | None:
    """The manifest's parser: ``given`` at ``hitch models add`` (a parser name, or ``none`` for no parser)
    wins over the one ``derived`` from the template; an unknown name is refused."""
    if given is None:
        return derived
    if given == NO_TOOL_CALL_PARSER:
        return None
    for name in get_args(ToolCallParserName):
        if name == given:
            found: ToolCallParserName = name
            return found
    raise HitchError(
        "usage_error",
        f"unknown tool-call parser {given!r}: SGLang 0.5.23 has {', '.join(SGLANG_TOOL_CALL_PARSERS)} (or none)",
        {"tool_call_parser": given, "choices": [*SGLANG_TOOL_CALL_PARSERS, NO_TOOL_CALL_PARSER]},
    )
