"""The report builders as one facade: the support matrix, the per-run page and the load page.

``hitch report build`` and the certification plugin call these; each writes one self-contained HTML file
into ``out_dir`` and returns its path.
"""

from __future__ import annotations

from reports.load_page import build_load_page
from reports.matrix import VerifyFn, build_matrix
from reports.run_page import build_run_page

__all__ = ["VerifyFn", "build_load_page", "build_matrix", "build_run_page"]
