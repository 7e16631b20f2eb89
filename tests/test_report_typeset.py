"""The report typeset for reading, checked on its real renderings (tests/typeset.py): the PDF
(WeasyPrint, read back by pdftotext) breaks no word inside a line; the HTML in headless Chromium
at 1280 and 800 px has no cell whose content spills into the next column and no sideways
scroll; no section, the first page (the PDF's first two pages) first, sets a raw key or an
unrounded number in prose. Each check is first shown to fail on a page made to break it. CI
installs Debian's chromium and poppler-utils for its services section; without them these tests
skip."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typeset import (
    CHROMIUM,
    broken_words,
    html_words,
    page_faults,
    pdf_lines,
)

from harness.report.context import build_context
from harness.report.render import code_words, render, write_pdf

FIX = Path(__file__).parent / "fixtures" / "pipeline"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists() or shutil.which("pdftotext") is None,
                       reason="needs Debian's chromium and poppler-utils (CI's services section)"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from test_report import paths_in

    out = tmp_path_factory.mktemp("typeset")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", "1700000000")
        html = render(build_context(paths_in(FIX)))
    (out / "audit.html").write_text(html, encoding="utf-8")
    assert write_pdf(html, out / "audit.pdf") == []  # nothing past a page's margin
    return out / "audit.html", out / "audit.pdf"


def test_the_checks_fail_on_pages_made_to_break_them(tmp_path: Path) -> None:
    assert broken_words(["the arm sits at chanc", "e level"], {"the", "arm", "sits", "at",
                                                               "chance", "level"}) == ["chanc/e"]
    assert broken_words(["the arm sits at", "chance level"], {"at", "chance"}) == []
    page = tmp_path / "bad.html"
    page.write_text("<table style='width:300px;table-layout:fixed'><tr><td style='white-space:"
                    "nowrap'>holds within input rounding and more words</td><td>x</td></tr>"
                    "</table><div style='width:1000px'>bound.largest_ratio x 100 = "
                    "0.03933333333333333</div>")
    faults = page_faults(page, 800)
    assert faults["spill"] and faults["scroll"] > 0
    assert faults["raw_keys"] == ["bound.largest_ratio"]
    assert faults["unrounded"] == ["0.03933333333333333"]
    page.write_text(f"<p>{code_words('jepa_50m_mean - qwen7b_wit = 0.007')}</p>")
    assert page_faults(page, 800)["raw_keys"] == []  # identifiers set as code are no prose


def test_the_pdf_breaks_no_word(report: tuple[Path, Path]) -> None:
    html, pdf = report
    words = html_words(html.read_text(encoding="utf-8"))
    assert broken_words(pdf_lines(pdf, 1, 999), words) == []


@pytest.mark.parametrize("width", [1280, 800])
def test_no_cell_spills_and_no_page_scrolls_sideways(report: tuple[Path, Path],
                                                      width: int) -> None:
    faults = page_faults(report[0], width)
    assert (faults["scroll"], faults["spill"], faults["wide"]) == (0, [], [])


def test_the_first_page_sets_no_raw_key_and_no_unrounded_number(report: tuple[Path, Path]
                                                                 ) -> None:
    faults = page_faults(report[0], 1280, first_page_only=True)
    assert (faults["raw_keys"], faults["unrounded"]) == ([], [])


def test_no_section_sets_a_raw_key_or_an_unrounded_number_in_prose(report: tuple[Path, Path]
                                                                   ) -> None:
    faults = page_faults(report[0], 1280)
    assert (faults["raw_keys"], faults["unrounded"]) == ([], [])

