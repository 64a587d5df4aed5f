"""Exact context accounting with the model's own tokenizer and chat template (spec §10.2).

Owns :class:`ContextChecker`: the prompt a request becomes is rendered with the checkpoint's chat template
(jinja2 ``ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)``, as Hugging Face renders
it) and counted with its ``tokenizer.json``. A request whose prompt plus output budget does not fit the
lock's per-request context is refused with ``inference_context_exceeded``; nothing is ever truncated.

Cost: for a byte-level BPE tokenizer without a normalizer every token covers at least one byte of the
rendered text, so ``tokens <= utf8_bytes + 1``; when that bound already fits, the exact count is not
needed. The rendered size itself comes, when it can be proven, from :class:`gateway.template_bound.TemplateBound`
(one instrumented render per message skeleton, then arithmetic on the texts' byte lengths), so a request
that provably fits is neither rendered nor tokenized. This is an upper bound, never an estimate; a request
whose bound does not fit, or whose skeleton cannot be proven, is rendered and counted exactly.

The same tokenizers also give a lower bound: no token covers more bytes than the longest entry of the
vocabulary or the added tokens (``max_token_bytes``), so ``tokens >= ceil(utf8_bytes / max_token_bytes)``.
A rendered prompt whose lower bound already cannot fit is refused without tokenizing it (a 1 MB prompt
tokenized whole costs hundreds of MB of RSS that stay). What is tokenized is therefore at most
``context * max_token_bytes`` bytes, and the request body itself is bounded (:mod:`gateway.intake`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from tokenizers import Tokenizer

from gateway.sglang_view import content_format, supports_inline_system, template_view
from gateway.template_bound import TemplateBound
from harness.chat_template import hf_environment, raise_exception, strftime_now
from harness.errors import HitchError

__all__ = ["ContextChecker", "ContextVerdict"]


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _max_token_bytes(tok_json: dict[str, Any]) -> int:
    """The most input bytes one token can cover: byte-level vocab entries are one char per byte; added
    tokens match their content literally."""
    vocab = (tok_json.get("model") or {}).get("vocab") or {}
    longest = max((len(t) for t in vocab), default=1)
    added = [a.get("content") for a in tok_json.get("added_tokens") or [] if isinstance(a, dict)]
    return max([longest, *(len(a.encode("utf-8")) for a in added if isinstance(a, str))])


def _byte_bounded(tok_json: dict[str, Any]) -> bool:
    """True when every token of this tokenizer covers >= 1 byte of input (byte-level BPE, no normalizer)."""
    if tok_json.get("normalizer") is not None:
        return False
    pre = tok_json.get("pre_tokenizer") or {}
    kinds = [p.get("type") for p in pre.get("pretokenizers", [])] if pre.get("type") == "Sequence" else [pre.get("type")]
    model = tok_json.get("model") or {}
    return model.get("type") == "BPE" and "ByteLevel" in kinds


@dataclass(frozen=True)
class ContextVerdict:
    """What the check established: the exact prompt tokens, or only an upper bound that fits."""

    prompt_tokens: int | None
    bound: int


class ContextChecker:
    """The tokenizer + chat template of one checkpoint directory (build with :meth:`for_dir`)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: str,
        specials: dict[str, str],
        byte_bounded: bool,
        max_token_bytes: int | None = None,
    ) -> None:
        # the environment transformers' apply_chat_template renders in (SGLang's jinja path uses it)
        self._template = hf_environment().from_string(template)
        self._tokenizer = tokenizer
        self._specials = specials
        self._byte_bounded = byte_bounded
        # the lower bound needs every byte covered by a token (byte-level BPE, no normalizer)
        self._max_token_bytes = max_token_bytes if byte_bounded else None
        self._format = content_format(template)
        hf_globals = {"raise_exception": raise_exception, "strftime_now": strftime_now}
        self._inline_system = supports_inline_system(template, hf_globals)
        self._bound = TemplateBound(template, {"raise_exception": raise_exception}, specials) if byte_bounded else None
        self.renders = 0  # exact renders (the tests watch this)
        self.skipped = 0  # requests answered by the proven bound alone
        self.refused_untokenized = 0  # requests refused by the lower bound alone

    @classmethod
    def for_dir(cls, directory: Path) -> ContextChecker:
        """The checker of ``directory``, loaded once per process."""
        return _load(Path(directory))

    @classmethod
    def load(cls, directory: Path) -> ContextChecker:
        tok_path = directory / "tokenizer.json"
        try:
            tok_json = json.loads(tok_path.read_text(encoding="utf-8"))
            tokenizer = Tokenizer.from_file(str(tok_path))
            cfg_path = directory / "tokenizer_config.json"
            cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        except Exception as exc:  # the tokenizers library raises bare Exceptions on bad files
            raise HitchError("local_model_invalid", "the model's tokenizer cannot be loaded", {"dir": str(directory)}) from exc
        template = cfg.get("chat_template")
        jinja_file = directory / "chat_template.jinja"
        if not isinstance(template, str) and jinja_file.is_file():
            template = jinja_file.read_text(encoding="utf-8")
        if not isinstance(template, str):
            raise HitchError("local_model_invalid", "the model has no chat template", {"dir": str(directory)})
        specials = {k: _token_text(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        bounded = _byte_bounded(tok_json)
        return cls(tokenizer, template, specials, bounded, _max_token_bytes(tok_json) if bounded else None)

    def view(self, messages: list[dict[str, Any]], responses: bool = False) -> list[dict[str, Any]]:
        """The messages this template renders for a request's (SGLang-normalized) messages."""
        return template_view(messages, self._format, responses and not self._inline_system)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        self.renders += 1
        try:
            return self._template.render(
                messages=messages, tools=tools or None, add_generation_prompt=True, **self._specials, **(template_kwargs or {})
            )
        except TemplateError as exc:
            raise HitchError(
                "inference_protocol_unsupported", f"the model's chat template refused the input: {exc.message}", {}
            ) from exc
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError, OverflowError) as exc:
            # The template's own code failed on this input (e.g. "+" on a null field, a float tojson cannot
            # encode). SGLang answers that with a 500, so it is refused here as the input's fault.
            raise HitchError(
                "inference_protocol_unsupported", f"the model's chat template cannot render the input: {type(exc).__name__}", {}
            ) from exc

    def encode(self, text: str) -> list[int]:
        """The prompt ids of a rendered template (the specials are in the text: none added)."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def check(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        budget: int,
        context: int,
        responses: bool = False,
        template_kwargs: dict[str, Any] | None = None,
    ) -> ContextVerdict:
        """Raise ``inference_context_exceeded`` unless prompt + budget fits ``context`` (SGLang's rule:
        the prompt must be shorter than the context and prompt + max_new_tokens must not exceed it).
        ``messages``/``tools`` are SGLang's view of the request (:mod:`gateway.sglang_view`)."""
        messages = self.view(messages, responses)
        if self._bound is not None:
            shape = self._bound.shape(messages, tools, template_kwargs)
            if shape is not None:
                bound = shape.size(messages) + 1
                if bound < context and bound + budget <= context:
                    self.skipped += 1
                    return ContextVerdict(None, bound)
        text = self.render(messages, tools, template_kwargs)
        if self._byte_bounded:
            size = len(text.encode("utf-8"))
            bound = size + 1
            if bound < context and bound + budget <= context:
                return ContextVerdict(None, bound)
            if self._max_token_bytes:
                least = -(-size // self._max_token_bytes)
                if least >= context or least + budget > context:
                    self.refused_untokenized += 1
                    raise HitchError(
                        "inference_context_exceeded",
                        f"the input is at least {least} tokens and the output budget {budget}; the context holds {context}",
                        {"prompt_tokens_at_least": least, "max_output_tokens": budget, "context_tokens": context},
                    )
        tokens = self.count(text)
        if tokens >= context or tokens + budget > context:
            raise HitchError(
                "inference_context_exceeded",
                f"the input is {tokens} tokens and the output budget {budget}; the context holds {context}",
                {"prompt_tokens": tokens, "max_output_tokens": budget, "context_tokens": context},
            )
        return ContextVerdict(tokens, tokens)


@functools.lru_cache(maxsize=8)
def _load(directory: Path) -> ContextChecker:
    return ContextChecker.load(directory)
