"""The load page: gateway vs direct figures from locust CSVs, streaming metrics apart, time series."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import HitchError
from reports.builder import build_load_page
from tests.reports import sample_data as sd


def _figure(html: str, figure: str) -> list[str]:
    start = html.index(f'data-figure="{figure}"')
    row = html[start : html.index("</tr>", start)]
    return re.findall(r'<td class="num">([^<]*)</td>', row)


def test_gateway_and_direct_side_by_side(tmp_path: Path) -> None:
    page = build_load_page(sd.write_locust_dir(tmp_path / "load"), tmp_path / "out")
    html = page.read_text()
    assert page == tmp_path / "out" / "load.html"
    # request figures come from the request row, not the Aggregated row that mixes in the TTFT metric
    assert _figure(html, "requests") == ["1000", "999", "1.00"]
    assert _figure(html, "failures") == ["3", "0", "—"]
    assert _figure(html, "p50 ms") == ["42", "40", "1.05"]
    stream = html[html.index('id="stream-metrics"') :]
    assert stream.count("<td>ttft</td>") == 2
    charts = re.findall(r'data-chart="([\w-]+)"', html)
    assert charts == ["load-rps", "load-users", "load-p50", "load-p95"]
    assert html.count('class="series" data-series="gateway"') == 4
    assert "&lt;script&gt;" in html and "<script" not in html


def test_one_target_alone_is_enough(tmp_path: Path) -> None:
    load = sd.write_locust_dir(tmp_path / "load", targets=("gateway",))
    (load / "gateway_stats_history.csv").unlink()
    html = build_load_page(load, tmp_path / "out").read_text()
    assert _figure(html, "requests") == ["1000", "—"]
    assert 'data-chart="' not in html


@pytest.mark.parametrize("case", ["missing_dir", "no_csv", "not_locust", "bad_summary"])
def test_unusable_load_dirs_are_input_errors(tmp_path: Path, case: str) -> None:
    load = tmp_path / "load"
    if case != "missing_dir":
        load.mkdir()
    if case == "not_locust":
        (load / "direct_stats.csv").write_text("a,b\n1,2\n")
    if case == "bad_summary":
        sd.write_locust_dir(load)
        (load / "summary.json").write_text("{")
    with pytest.raises(HitchError) as err:
        build_load_page(load, tmp_path / "out")
    assert err.value.code == "report_input_invalid"
    assert not (tmp_path / "out" / "load.html").exists()
