"""A proven upper bound on the size of a rendered chat prompt, without rendering it (spec §10.2 cost).

Owns :class:`TemplateBound`. The context check needs the byte size of the prompt the chat template makes
of a request; rendering the template (jinja, sandboxed) is the main per-request cost of the gateway. Most
requests differ only in message *text*, so this module proves, once per message skeleton, how the text
enters the prompt, and answers later requests with arithmetic.

A **skeleton** is everything the template sees except the text: every message's fields other than
``content`` (role, tool calls, names ...), whether each ``content`` is empty, and the tools. For one
skeleton the template is rendered once by a **probe**: each non-empty content is replaced by a unique
sentinel, and the render runs in an instrumented sandbox that refuses (the skeleton is then marked
"not provable", and those requests are rendered exactly) whenever the template *observes* a text rather
than only splicing it:

- a comparison (``==``, ``in``, ...) or a ``for`` loop with a text among its operands (the template's
  AST is rewritten so every comparison operand and loop iterable passes a check),
- an attribute, method, index or slice of a text, a text passed to any call other than a template macro,
  a text in any arithmetic other than string ``+``,
- a text given to a filter other than ``string``/``safe``/``default`` (or ``length``/``count`` of a
  container), or to a test other than the type tests (``string``, ``none``, ``defined`` ...),
- the clock (``strftime_now``) or ``lipsum``, whose output would make a cached skeleton wrong.

Truth tests are allowed: a value holding a text is a concatenation that contains it, and the skeleton
records which texts are empty, so the probe takes the same branches as any request of the skeleton. After
the render each sentinel must appear verbatim (any escaping, ``tojson``, ``repr`` or HTML-escape would
alter the sentinel's control characters and quote, and is refused). The render of a request is then the
probe's output with each sentinel replaced by its text, so its UTF-8 size is exactly
``base + sum(times_i * bytes(content_i))`` — an exact size, used as an upper bound on tokens by the caller.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import nodes
from jinja2.runtime import Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harness.chat_template import HF_EXTENSIONS, hf_tojson

__all__ = ["Shape", "TemplateBound"]

_TYPE_TESTS = frozenset(
    {"defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
     "boolean", "true", "false", "callable", "escaped"}
)  # fmt: skip
_IDENTITY_FILTERS = frozenset({"string", "safe", "default", "d"})
_COUNT_FILTERS = frozenset({"length", "count"})
_CMP_FILTER = "hitch_probe_cmp"
_ITER_FILTER = "hitch_probe_iter"
_OPAQUE_FILTER = "hitch_probe_opaque"
_JINJA_CALL_STATE = ("_loop_vars", "_block_vars")  # jinja's own bookkeeping, dropped before the call
_HEAD, _TAIL = "\x01<'", '">\x02'  # characters every escaping or serialization rewrites
_MAX_SHAPES = 1024
_MAX_KEY_CHARS = 256 << 10
_GIVE_UP_AFTER = 32  # refused probes without a single proof: stop probing this template


class _Refused(Exception):
    """The template observed a text: this skeleton cannot be bounded by splicing."""


@dataclass(frozen=True)
class Shape:
    """One proven skeleton: prompt bytes = ``base`` + sum(``times[i]`` * UTF-8 bytes of content i)."""

    base: int
    times: tuple[int, ...]

    def size(self, messages: list[dict[str, Any]]) -> int:
        total = self.base
        for n, msg in zip(self.times, messages, strict=True):
            if n:
                text: str = msg["content"]
                total += n * (len(text) if text.isascii() else len(text.encode("utf-8")))
        return total


class _ProbeEnv(ImmutableSandboxedEnvironment):
    """A sandbox that raises :class:`_Refused` whenever a text (a string holding the marker) is observed."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})

    def __init__(self, marker: str) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=HF_EXTENSIONS)
        self.marker = marker
        self.refused = False
        filters = cast("dict[str, Callable[..., Any]]", self.filters)
        filters["tojson"] = hf_tojson
        tests = cast("dict[str, Callable[..., Any]]", self.tests)
        for name, fn in list(filters.items()):
            filters[name] = self._guard(name, fn, filter_=True)
        for name, fn in list(tests.items()):
            tests[name] = self._guard(name, fn, filter_=False)
        self.filters[_CMP_FILTER] = self._cmp_operand
        self.filters[_ITER_FILTER] = self._iterable
        self.filters[_OPAQUE_FILTER] = self._iterable
        self.globals["lipsum"] = self._refuse_call
        self.globals["strftime_now"] = self._refuse_call

    # -- taint --

    def tainted(self, value: Any) -> bool:
        """Does ``value`` hold a text? Unknown object kinds count as holding one."""
        if isinstance(value, str):
            return self.marker in value
        if value is None or isinstance(value, bool | int | float | Undefined):
            return False
        if isinstance(value, dict):
            return any(self.tainted(k) or self.tainted(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.tainted(v) for v in value)
        return True

    def _refuse(self) -> _Refused:
        self.refused = True
        return _Refused()

    def _refuse_call(self, *_: Any, **__: Any) -> Any:
        raise self._refuse()

    def _keys_tainted(self, obj: Any) -> bool:
        return isinstance(obj, dict) and any(self.tainted(k) for k in obj)

    # -- hooks --

    def _cmp_operand(self, value: Any) -> Any:
        if self.tainted(value):
            raise self._refuse()
        return value

    def _iterable(self, value: Any) -> Any:
        if (isinstance(value, str) and self.marker in value) or self._keys_tainted(value):
            raise self._refuse()
        return value

    def _guard(self, name: str, fn: Callable[..., Any], *, filter_: bool) -> Callable[..., Any]:
        skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            data = args[skip:]
            if any(self.tainted(a) for a in data) or any(self.tainted(v) for v in kwargs.values()):
                if filter_:
                    ok = name in _IDENTITY_FILTERS or (name in _COUNT_FILTERS and bool(data) and not isinstance(data[0], str))
                else:
                    ok = name in _TYPE_TESTS
                if not ok:
                    raise self._refuse()
            return fn(*args, **kwargs)

        return guarded

    def getattr(self, obj: Any, attribute: str) -> Any:
        if (isinstance(obj, str) and self.marker in obj) or self._keys_tainted(obj):
            raise self._refuse()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if (isinstance(obj, str) and self.marker in obj) or self._keys_tainted(obj) or self.tainted(argument):
            raise self._refuse()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(__obj, Macro):
            data = [v for k, v in kwargs.items() if k not in _JINJA_CALL_STATE]
            if any(__self.tainted(a) for a in args) or any(__self.tainted(v) for v in data):
                raise __self._refuse()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if self.tainted(left) or self.tainted(right):
            raise self._refuse()
        return super().call_binop(context, operator, left, right)

    def call_unop(self, context: Any, operator: str, arg: Any) -> Any:
        if self.tainted(arg):
            raise self._refuse()
        return super().call_unop(context, operator, arg)

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        compares = list(tree.find_all(nodes.Compare))
        loops = list(tree.find_all(nodes.For))
        slices = [g for g in tree.find_all(nodes.Getitem) if isinstance(g.arg, nodes.Slice)]  # bypass getitem
        for cmp in compares:
            cmp.expr = _wrap(cmp.expr, _CMP_FILTER)
            for op in cmp.ops:
                op.expr = _wrap(op.expr, _CMP_FILTER)
        for loop in loops:
            loop.iter = _wrap(loop.iter, _ITER_FILTER)
        for item in slices:
            item.node = _wrap(item.node, _OPAQUE_FILTER)
        return tree


def _wrap(expr: nodes.Node, name: str) -> nodes.Expr:
    return nodes.Filter(expr, name, [], [], None, None, lineno=expr.lineno)


class TemplateBound:
    """Proven prompt sizes of one chat template, cached per skeleton (thread-safe)."""

    def __init__(self, template: str, globals_: dict[str, Any], specials: dict[str, str]) -> None:
        self._marker = secrets.token_hex(8)
        self._env = _ProbeEnv(self._marker)
        for name, value in globals_.items():
            if name != "strftime_now":
                self._env.globals.setdefault(name, value)
        self._template = self._env.from_string(template)
        self._specials = specials
        self._shapes: dict[Any, Shape | None] = {}
        self._mutex = threading.Lock()
        self.enabled = True
        self.probes = 0
        self.proofs = 0

    def skeleton(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, kwargs: dict[str, Any] | None = None
    ) -> Any:
        """The cache key of a request: everything but the texts (None when the request has no usable key)."""
        parts: list[Any] = [repr(tools) if tools else None, repr(sorted(kwargs.items())) if kwargs else None]
        for msg in messages:
            content = msg.get("content")
            if not isinstance(content, str):
                return None
            role = msg.get("role")
            if len(msg) == 2 and type(role) is str:
                parts.append((role, not content))
            else:
                parts.append((repr([(k, v) for k, v in msg.items() if k != "content"]), not content))
        key = tuple(parts)
        return key

    def shape(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, kwargs: dict[str, Any] | None = None
    ) -> Shape | None:
        """The proven shape of this request's skeleton, probing once per skeleton; None if not provable."""
        if not self.enabled:
            return None
        key = self.skeleton(messages, tools, kwargs)
        if key is None:
            return None
        try:
            return self._shapes[key]
        except KeyError:
            pass
        if len(repr(key)) > _MAX_KEY_CHARS or self._marker in repr(key):
            return None
        shape = self._probe(messages, tools, kwargs)
        with self._mutex:
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.pop(next(iter(self._shapes)))
            self._shapes[key] = shape
            if shape is None and self.proofs == 0 and self.probes >= _GIVE_UP_AFTER:
                self.enabled = False
        return shape

    def _probe(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, kwargs: dict[str, Any] | None
    ) -> Shape | None:
        sentinels = [f"{_HEAD}{self._marker}{i:06d}{_TAIL}" if msg["content"] else "" for i, msg in enumerate(messages)]
        probe = [{**msg, "content": s} for msg, s in zip(messages, sentinels, strict=True)]
        with self._mutex:
            self.probes += 1
            self._env.refused = False
            try:
                out = self._template.render(
                    messages=probe, tools=tools or None, add_generation_prompt=True, **self._specials, **(kwargs or {})
                )
            except Exception:  # refused, or the template raised: the exact render decides
                return None
            if self._env.refused:
                return None
            times = tuple(out.count(s) if s else 0 for s in sentinels)
            spliced = sum(times)
            if out.count(self._marker) != spliced or out.count(_HEAD) != spliced or out.count(_TAIL) != spliced:
                return None  # a sentinel was transformed (escaped, serialized, cut) somewhere
            base = len(out.encode("utf-8")) - sum(n * len(s.encode("utf-8")) for n, s in zip(times, sentinels, strict=True))
            self.proofs += 1
            return Shape(base, times)
