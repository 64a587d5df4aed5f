"""Placeholder ``sgl_kernel`` for the generic-CPU SGLang runtime (sglang-0.5.23-cpu-generic).

PyPI has no CPU build of SGLang's kernel package, yet SGLang imports ``sgl_kernel`` at
module level in many places. On a CPU without AMX those kernels are never called (norm,
activation and RoPE use ``forward_native``, attention ``torch_native``, sampling ``pytorch``).

This module makes every import form work -- ``import sgl_kernel``, ``from sgl_kernel import X``,
``from sgl_kernel.flash_attn import Y``, ``import sgl_kernel.common_ops`` -- and every name it
hands out is a stub: calling it raises ``NotImplementedError("sgl_kernel shim: <name> called")``.
Attribute access on a stub gives another stub, so module-level constants such as
``scalar_types.uint4b8`` still import. If a future SGLang really calls a kernel, it fails loudly.

This file is part of the runtime's identity: its sha256 is in the runtime_id.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

SHIM = True
__version__ = "0.0.0+hitch.shim"


class _Stub:
    """A named placeholder: callable (raises) and attribute-able (more stubs)."""

    __slots__ = ("_shim_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_shim_name", name)

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"sgl_kernel shim: {self._shim_name} called")

    def __getattr__(self, attr: str) -> _Stub:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{self._shim_name}.{attr}")

    def __repr__(self) -> str:
        return f"<sgl_kernel shim stub {self._shim_name}>"


def _module_getattr(modname: str) -> Any:
    def __getattr__(attr: str) -> _Stub:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(f"module {modname!r} has no attribute {attr!r}")
        return _Stub(f"{modname}.{attr}")

    return __getattr__


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"sgl_kernel shim submodule {spec.name}")
        module.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        module.SHIM = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _ShimFinder(importlib.abc.MetaPathFinder):
    """Answers every ``sgl_kernel.<anything>`` import with a shim package."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(__name__ + "."):
            return None
        return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=True)


if not any(isinstance(f, _ShimFinder) or type(f).__name__ == "_ShimFinder" for f in sys.meta_path):
    sys.meta_path.insert(0, _ShimFinder())

__getattr__ = _module_getattr(__name__)
