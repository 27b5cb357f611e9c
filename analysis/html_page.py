"""Building blocks of the self-contained HTML report: figures as PNG data URIs, tables that scroll
inside their own box and sort on a click, and the page around them.

Nothing in the page is fetched: no scripts, styles or fonts from elsewhere. Two small inline
scripts run: one sorts a table by the column whose header is clicked; the other counts, once the
page has loaded, how many images decoded and how many script errors happened, and writes the
counts onto ``<body>`` (``data-images-total``, ``data-images-ok``, ``data-script-errors``), so that
a headless browser can check the page.
"""

from __future__ import annotations

import base64
import html
import os

import pandas as pd

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1500px; }
.scroll { max-height: 480px; max-width: 100%; overflow: auto; border: 1px solid #ddd; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { background: #eee; position: sticky; top: 0; cursor: pointer; }
th.sorted-asc::after { content: " ▲"; } th.sorted-desc::after { content: " ▼"; }
td:first-child, th:first-child { text-align: left; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figcaption { font-size: 12px; color: #555; max-width: 700px; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.5em; font-size: 12px; overflow-x: auto; }
.note { color: #a40; }
.summary li { margin: 0.2em 0; }
"""

SCRIPT = """
var scriptErrors = 0;
window.addEventListener("error", function () { scriptErrors++; });
function sortTable(th) {
  var table = th.closest("table"), body = table.tBodies[0];
  var column = Array.prototype.indexOf.call(th.parentNode.children, th);
  var ascending = !th.classList.contains("sorted-asc");
  Array.prototype.forEach.call(th.parentNode.children, function (h) {
    h.classList.remove("sorted-asc", "sorted-desc");
  });
  th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
  var rows = Array.prototype.slice.call(body.rows);
  function key(row) {
    var text = row.cells[column] ? row.cells[column].textContent.trim() : "";
    var number = parseFloat(text.replace("\\u2212", "-"));
    return isNaN(number) ? text : number;
  }
  rows.sort(function (a, b) {
    var x = key(a), y = key(b);
    if (typeof x === "number" && typeof y === "number") { return ascending ? x - y : y - x; }
    if (typeof x === "number") { return -1; }
    if (typeof y === "number") { return 1; }
    return ascending ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
  });
  rows.forEach(function (row) { body.appendChild(row); });
}
document.addEventListener("click", function (event) {
  var th = event.target.closest && event.target.closest("table.sortable th");
  if (th) { sortTable(th); }
});
window.addEventListener("load", function () {
  var images = document.images, ok = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { ok++; }
  }
  document.body.setAttribute("data-images-total", images.length);
  document.body.setAttribute("data-images-ok", ok);
  document.body.setAttribute("data-script-errors", scriptErrors);
});
"""


def image(path: str, caption: str) -> str:
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    alt = html.escape(os.path.basename(path))
    return (
        f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def table(df: pd.DataFrame, *, links: dict[str, str] | None = None) -> str:
    """A sortable table in its own scrolling box. ``links`` maps a column to the column that holds
    each row's link target (relative URL): that column's cells become links."""
    shown = pd.DataFrame({c: df[c].astype(object).map(_cell) for c in df.columns}, index=df.index)
    if links:
        for column, target in links.items():
            text = df[column].astype(object).map(_cell)
            href = df[target].astype(object).map(
                lambda v: None if pd.isna(v) else html.escape(str(v), quote=True))
            shown[column] = [t if h is None else f'<a href="{h}/">{t}</a>' for t, h in zip(text, href)]
    body = shown.to_html(index=False, border=0, escape=False, classes="sortable")
    return f'<div class="scroll">{body}</div>'


def _cell(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1e6 else f"{value:.4g}"
    return html.escape(str(value))


def note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def page(title: str, heading: str, sections: list[str]) -> str:
    body = "".join(f"<section>{s}</section>" for s in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{html.escape(title)}</title>
<link rel="icon" href="data:,">
<style>{STYLE}</style>
<script>{SCRIPT}</script>
</head><body>
<h1>{html.escape(heading)}</h1>
{body}
</body></html>
"""
