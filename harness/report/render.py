"""The report's HTML and PDF from its context (harness.report.context.build_context): Jinja2
templates that only format, fonts embedded so the HTML needs nothing installed, and a PDF
printed from the same HTML by WeasyPrint, byte-stable for the same HTML."""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.resources
import io
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
from markupsafe import Markup, escape

from prh.io import write_bytes

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
FONTS = (("DejaVu Sans", "normal", "DejaVuSans.ttf"),
         ("DejaVu Sans", "bold", "DejaVuSans-Bold.ttf"),
         ("DejaVu Sans Mono", "normal", "DejaVuSansMono.ttf"))
FIRST_COLUMNS = ("id", "check", "kind", "statement", "formula", "expression", "printed",
                 "reported", "value", "recomputed", "computed", "status", "verdict")
LIST_SHOWN = 12  # longer lists of plain values (e.g. clean_ids) are shown as a count


def source_date() -> str | None:
    """The report date: SOURCE_DATE_EPOCH when set (reproducible builds), else none at all."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return None
    return datetime.fromtimestamp(int(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rows_and_tables(obj: Any, prefix: str = "") -> tuple[list[tuple[str, Any]],
                                                         dict[str, list[dict]]]:
    """Scalars as (dotted key, value) rows; lists of records as named tables."""
    rows: list[tuple[str, Any]] = []
    tables: dict[str, list[dict]] = {}
    if isinstance(obj, Mapping):
        for k in obj:
            sub_rows, sub_tables = rows_and_tables(obj[k], f"{prefix}{k}.")
            rows += sub_rows
            tables.update(sub_tables)
    elif isinstance(obj, list) and obj and all(isinstance(x, Mapping) for x in obj):
        tables[prefix.rstrip(".")] = [dict(x) for x in obj]
    elif isinstance(obj, list) and len(obj) > LIST_SHOWN:
        rows.append((prefix.rstrip("."), f"{len(obj)} items (not listed)"))
    elif isinstance(obj, list):
        rows.append((prefix.rstrip("."), ", ".join(str(x) for x in obj)))
    else:
        rows.append((prefix.rstrip("."), obj))
    return rows, tables


def table_of(records: Sequence[Mapping]) -> dict[str, list]:
    """Records with possibly different keys as one table: the union of keys, in first-seen
    order; nested values shown as `key=value` text."""
    cols: list[str] = []
    for r in records:
        cols += [k for k in r if k not in cols]
    cols.sort(key=lambda c: FIRST_COLUMNS.index(c) if c in FIRST_COLUMNS else len(FIRST_COLUMNS))
    return {"columns": cols, "rows": [[brief(r.get(c)) for c in cols] for r in records]}


def brief(value: Any) -> Any:
    """Nested evidence as one line of text; floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={brief(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(str(brief(v)) for v in value)
    return value


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number by its kind: floats to `digits` decimals (`digits` significant when tiny,
    scientific below 1e-4), integers as they are, a yes/no as a word, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if not isinstance(value, int | float | np.floating):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if value != 0 and abs(value) < 10 ** -digits:
        return f"{value:.{digits}g}" if abs(value) >= 1e-4 else f"{value:.2e}"
    return f"{value:.{digits}f}"


def fmt_ci(ci: Sequence[float] | None, digits: int = 3) -> str:
    return "—" if not ci else f"[{fmt_num(ci[0], digits)}, {fmt_num(ci[1], digits)}]"


def font_css(text: str, font_dir: Path = FONT_DIR) -> str:
    """`@font-face` rules embedding DejaVu, subset to the characters of `text`, so the HTML
    needs no installed font and WeasyPrint prints no empty glyphs (WeasyPrint #1810). Fonts
    that are not installed are skipped and the browser falls back to `sans-serif`."""
    chars = "".join(sorted(set(text) | set("0123456789.-+—−±[]()%, ")))
    return "\n".join(
        f'@font-face {{ font-family: "{family}"; font-weight: {weight}; '
        f'src: url(data:font/ttf;base64,{subset_font(font_dir / name, chars)}) '
        'format("truetype"); }'
        for family, weight, name in FONTS if (font_dir / name).exists())


@functools.lru_cache(maxsize=16)
def subset_font(path: Path, chars: str) -> str:
    """The font at `path` cut down to `chars`, base64; byte-stable (no new `head` date)."""
    from fontTools import subset  # installed with WeasyPrint

    opts = subset.Options(drop_tables=[*subset.Options().drop_tables, "FFTM"])
    font = subset.load_font(str(path), opts)
    font.recalcTimestamp = False
    sub = subset.Subsetter(opts)
    sub.populate(text=chars)
    sub.subset(font)
    buf = io.BytesIO()
    subset.save_font(font, buf, opts)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def templates_dir() -> Path:
    """The report templates: reports/templates/ of the source tree, shipped in the wheel as the
    package `harness.templates` (pyproject's package-dir), found through importlib.resources."""
    return Path(str(importlib.resources.files("harness.templates")))


# an identifier in a sentence: a snake_case name (with any path or dots around it) or a dotted
# path of lowercase names; tests/typeset.py's RAW_KEY finds those left outside code style
CODE_WORD = re.compile(r"[\w./-]*[a-z0-9]_[\w./-]*[\w]|\b[a-z_]+\.[a-z_]+(?:\.[a-z_]+)*\b")


def ident(text: Any) -> Markup:
    """An identifier that may break after `_`, `.` and `/` only (never inside a name)."""
    return Markup(re.sub(r"([_./])", r"\1<wbr>", str(escape(text))))


def code_words(text: Any) -> Markup:
    """`text` with each identifier in it set as code (`.mono`, breakable at `ident`'s points):
    a claim id in a formula, a revision or file name in a command."""
    out, last = [], 0
    raw = str(text)
    for m in CODE_WORD.finditer(raw):
        out += [str(escape(raw[last:m.start()])),
                f'<span class="mono">{ident(m.group())}</span>']
        last = m.end()
    return Markup("".join([*out, str(escape(raw[last:]))]))


def plural(n: int, many: str = "s", one: str = "") -> str:
    """The word ending for a count: `many` unless n is 1."""
    return one if n == 1 else many


def render(context: Mapping, templates: Path | None = None,
           name: str = "report.html.j2") -> str:
    """The report HTML (`name`: the page template; the web-text report's is recap.html.j2):
    autoescaped (captions and statements are data), self-contained (inline SVG, embedded CSS
    and fonts, no script, no network)."""
    loader = jinja2.FileSystemLoader(templates or templates_dir())
    env = jinja2.Environment(loader=loader, autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["num"] = fmt_num
    env.filters["ci"] = fmt_ci
    env.filters["ident"] = ident
    env.filters["code_words"] = code_words
    env.filters["plural"] = plural
    template = env.get_template(name)
    draft = template.render(**context, font_css="")
    return template.render(**context, font_css=Markup(font_css(draft)))


def write_pdf(html: str, path: str | os.PathLike[str]) -> list[str]:
    """Print `html` with WeasyPrint, atomically, and return what runs off a page (`off_page`).
    Same HTML -> same bytes: the date comes only from the HTML's `dcterms.created` (set from
    SOURCE_DATE_EPOCH) and the PDF identifier is a hash of the HTML (WeasyPrint issue #1553)."""
    from weasyprint import HTML  # slow import; only the PDF needs it

    ident = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode()
    document = HTML(string=html, base_url=None).render()
    write_bytes(path, document.write_pdf(pdf_identifier=ident))
    return off_page(document)


def off_page(document: Any, slack: float = 1.0) -> list[str]:
    """Every laid-out text line or table of a WeasyPrint document whose right edge passes the
    page's right margin by more than `slack` CSS px, as 'page N: TEXT (X px past the margin)'."""
    def boxes(box: Any) -> Any:
        yield box
        for child in getattr(box, "children", None) or []:
            yield from boxes(child)

    found = []
    for number, page in enumerate(document.pages, 1):
        page_box = page._page_box
        right = page_box.margin_width() - page_box.margin_right
        for box in boxes(page_box):
            if type(box).__name__ not in ("LineBox", "TableBox"):
                continue
            past = box.position_x + box.margin_width() - right
            if past > slack:
                text = " ".join(getattr(b, "text", "") for b in boxes(box)).split()
                found.append(f"page {number}: {' '.join(text)[:60]!r} ({past:.0f} px past the "
                             "margin)")
    return found
