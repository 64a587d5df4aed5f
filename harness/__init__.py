"""Hitch local inference runtime core: store, runtimes, locks, doctor, services.

Importable without pytest; nothing here imports ``gateway``, ``fixtures`` or ``certify``.
"""

__version__ = "0.1.0"
