"""The optional extras (pyproject.toml): torch for the torch tasks and a user's own model, torchvision for downloads.

``require(module, what)`` imports one lazily, or says in one line that ``what`` needs it and how to install it.
"""
from __future__ import annotations

import importlib

EXTRAS = {"torch": "torch", "torchvision": "torch,download"}  # the extras (pyproject.toml) that bring a module


def install_extra(module: str) -> str:
    """How to install the extra that brings ``module``."""
    extra = EXTRAS[module]
    return f"pip install -e '.[{extra}]' in the project's folder (or pip install 'zofl[{extra}]')"


class MissingExtra(ValueError):
    """An optional dependency (torch, torchvision) that this install lacks; the message names the extra."""


def require(module: str, what: str):
    """``module`` imported, or MissingExtra saying that ``what`` needs it and how to install it (also where it
    is installed but fails to import: a torchvision built for another torch raises RuntimeError at import)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{what} needs {module}, which is not installed: {install_extra(module)}") from exc
    except Exception as exc:  # noqa: BLE001 -- whatever a broken install raises, one line names it
        first = " ".join(str(exc).split())[:200]
        raise MissingExtra(f"{what} needs {module}, which is installed but does not import ({type(exc).__name__}: "
                           f"{first}): install the release pyproject.toml pins for this torch "
                           f"({install_extra(module)})") from exc
