"""Self-contained HTML reports: support matrix (verified entries only), per-run page, load page.

See :mod:`reports.builder` for the entry points.
"""

from reports.builder import VerifyFn, build_load_page, build_matrix, build_run_page

__all__ = ["VerifyFn", "build_load_page", "build_matrix", "build_run_page"]
