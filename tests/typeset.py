"""What a reader would see wrong in the report, measured on the real renderings: words broken
inside a PDF line (pdftotext), cells whose content spills into the next column and pages that
scroll sideways (headless Chromium through Playwright), raw keys and unrounded numbers in prose
(text outside code-styled elements)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package: Playwright drives it, never downloads
# a params/results key where a sentence belongs: snake_case words or a dotted path of them
RAW_KEY = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[a-z_]+\.[a-z_]+(?:\.[a-z_]+)*\b")
UNROUNDED = re.compile(r"\d\.0*[1-9]\d{6,}")  # more than 7 significant digits: a bare float
WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2,}(?![A-Za-z0-9])")  # not a run inside a hash


def pdf_lines(pdf: Path, first: int, last: int) -> list[str]:
    """The text lines of pages first..last in reading order (pdftotext -raw: the order WeasyPrint
    drew them, one table cell's lines after each other)."""
    out = subprocess.run(["pdftotext", "-raw", "-f", str(first), "-l", str(last), str(pdf), "-"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def broken_words(lines: list[str], source_words: set[str]) -> list[str]:
    """`head/tail` for each line that ends inside a word: its last token and the next line's
    first are not words of the source text, but joined they are."""
    out = []
    for this, after in zip(lines, lines[1:], strict=False):
        head = re.findall(r"(?<![A-Za-z0-9])[A-Za-z]+$", this.rstrip())
        tail = re.match(r"^[A-Za-z]+(?![0-9])", after.lstrip())
        if not head or not tail:
            continue
        a, b = head[0], tail[0]
        if a + b in source_words and not (a in source_words and b in source_words):
            out.append(f"{a}/{b}")
    return out


def html_words(html: str) -> set[str]:
    """Every word of the HTML's text, tags and styles dropped."""
    text = re.sub(r"<(style|script)[^>]*>.*?</\1>|<[^>]+>", " ", html, flags=re.S)
    return set(WORD.findall(text))


# For each cell, whether its content is wider than the cell (it overlaps the next column); for
# the page, whether it is wider than the window (it scrolls sideways); the text outside
# code-styled elements (.mono, .hash, code, pre, svg).
PAGE_SCRIPT = """() => {
  const spill = [];
  for (const cell of document.querySelectorAll('td, th')) {
    if (cell.closest('.table-scroll')) continue;
    if (cell.scrollWidth > cell.clientWidth + 1)
      spill.push(cell.innerText.slice(0, 60) + ' (' + cell.scrollWidth + ' > '
                 + cell.clientWidth + ')');
  }
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const prose = [];
  while (walker.nextNode()) {
    const el = walker.currentNode.parentElement;
    if (el.closest('.mono, .hash, code, pre, svg, style, script')) continue;
    prose.push(walker.currentNode.textContent);
  }
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.table-scroll')) continue;
    const r = el.getBoundingClientRect();
    if (r.right > window.innerWidth + 1 && !el.querySelector('*'))
      wide.push(el.tagName + ' ' + (el.innerText || '').slice(0, 50) + ' ('
                + Math.round(r.right) + ')');
  }
  return {scroll: document.documentElement.scrollWidth - window.innerWidth, spill, wide,
          prose: prose.join(' ')};
}"""


def page_faults(html: Path, width: int, first_page_only: bool = False) -> dict[str, object]:
    """The report's HTML at `width` px in headless Chromium: sideways scroll (px), cells that
    spill, leaf elements past the window's right edge (`wide`), raw keys and unrounded numbers
    in prose (of the first page only, if asked)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(html.resolve().as_uri())
            if first_page_only:
                page.evaluate("() => { const f = document.querySelector('.first-page');"
                              " document.body.replaceChildren(f); }")
            found = page.evaluate(PAGE_SCRIPT)
        finally:
            browser.close()
    prose = found["prose"]
    return {"scroll": found["scroll"], "spill": found["spill"], "wide": found["wide"],
            "raw_keys": sorted(set(RAW_KEY.findall(prose))),
            "unrounded": sorted(set(UNROUNDED.findall(prose)))}
