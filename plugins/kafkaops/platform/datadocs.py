"""Great Expectations Data Docs that read with no network.

GX's pages load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega from CDNs, and its index
builds its table with JavaScript: offline (an air-gapped Airflow, a browser without internet) the
index is blank and the pages unstyled, their status icons empty. :func:`make_offline` rewrites a
rendered site in place:

- every page keeps its HTML and loses its scripts, its stylesheets and its remote images; a small
  stylesheet of kafkaops' takes their place (layout, tables, status icons as characters, collapsed
  sections open), so the page is one self-contained file like kafkaops' own pages;
- the index becomes a static page listing the gate's validation results, with their outcome and
  counts, and the suites;
- of the 4 MB of fonts, animations and styles GX copies into ``static/``, only the files a page
  still links to stay (the favicon): the site goes into the kafkaops store with each gate.

:func:`offline_page` is pure (HTML in, HTML out); it finds the elements with the standard library's
HTML parser and cuts them out of the source, leaving every other byte as GX wrote it.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from kafkaops.platform.render import html_templates

#: Takes the place of Bootstrap and Font Awesome: just enough to read the pages.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; font-size: 14px; }
a { color: #0b5cad; }
nav.navbar { display: flex; align-items: center; padding: .5em 2em; border-bottom: 1px solid #ddd; }
nav.navbar .navbar-brand { display: none; }
.breadcrumb { display: flex; list-style: none; margin: 0; padding: 0; gap: .5em; }
.breadcrumb-item + .breadcrumb-item::before { content: "/"; padding-right: .5em; color: #777; }
.container-fluid { padding: 1em 2em; }
.row { display: flex; flex-wrap: wrap; }
.col-12 { flex: 0 0 100%; } .col-6 { flex: 0 0 50%; }
.col-lg-2 { flex: 0 0 15%; padding-right: 1em; box-sizing: border-box; }
.col-lg-10, .col-md-10 { flex: 1 1 0; min-width: 0; }
.card { border: 1px solid #ddd; border-radius: 4px; margin-bottom: 1em; }
.card-header { background: #f3f3f3; padding: .3em .6em; }
.card-body { padding: .3em .6em; }
.card:has(.btn-group-toggle) { display: none; }
.nav { list-style: none; padding-left: .5em; }
.alert-secondary { background: #eef1f4; padding: .4em .8em; border-radius: 4px; margin: .8em 0 .4em; }
h4, h5, h6 { margin: .3em 0; } h5 { font-size: 1.1em; } h6 { font-size: 1em; }
table { border-collapse: collapse; margin: .4em 0 .8em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: #f3f3f3; }
.badge { background: #eceff1; border-radius: 3px; padding: 0 .3em; font-family: monospace; }
.collapse { display: block; }
a[data-toggle="collapse"] { display: none; }
.fas { font-style: normal; font-weight: bold; }
.fa-check-circle::before { content: "\\2714"; }
.fa-times::before { content: "\\2718"; }
.fa-exclamation-triangle::before { content: "\\26A0"; }
.fa-question-circle::before { content: "?"; }
.text-success { color: #1a7f37; } .text-danger { color: #cf222e; } .text-warning { color: #9a6700; }
footer { display: none; }
"""

#: Elements dropped whole, with their content.
_DROPPED = ("script", "style")


def _remote(url: str | None) -> bool:
    return url is not None and url.strip().lower().startswith(("http://", "https://", "//"))


class _Cuts(HTMLParser):
    """Where in the source the elements to drop are, and where the head ends."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=False)
        self._html = html
        self._lines = [0]
        for line in html.splitlines(keepends=True):
            self._lines.append(self._lines[-1] + len(line))
        self.cuts: list[tuple[int, int]] = []
        self.head_end: int | None = None
        self._open: tuple[str, int] | None = None

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._lines[line - 1] + column

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        start = self._offset()
        end = start + len(self.get_starttag_text() or "")
        values = dict(attrs)
        if tag in _DROPPED:
            self._open = (tag, start)
        elif tag == "link" and ("stylesheet" in (values.get("rel") or "").lower() or _remote(values.get("href"))):
            self.cuts.append((start, end))
        elif tag == "img" and _remote(values.get("src")):
            self.cuts.append((start, end))

    def handle_endtag(self, tag: str) -> None:
        start = self._offset()
        if self._open is not None and tag == self._open[0]:
            self.cuts.append((self._open[1], self._html.index(">", start) + 1))
            self._open = None
        elif tag == "head" and self.head_end is None:
            self.head_end = start


def offline_page(html: str, style: str = STYLE) -> str:
    """``html`` without scripts, stylesheets and remote images, with ``style`` inlined in its head."""
    found = _Cuts(html)
    found.feed(html)
    found.close()
    insert = found.head_end if found.head_end is not None else 0
    out, at = [], 0
    for start, end in sorted(found.cuts + [(insert, insert)]):
        out.append(html[at:start])
        if start == insert and end == insert:
            out.append(f"<style>{style}</style>\n")
        at = max(at, end)
    out.append(html[at:])
    return "".join(out)


@dataclass(frozen=True)
class ResultPage:
    """One validation result of a gate: the frame it checked, its outcome and counts, its pages
    (paths relative to the site)."""

    frame: str
    suite: str
    success: bool
    evaluated: int
    successful: int
    rows: int
    page: str
    suite_page: str | None = None


def index_page(gate: str, results: Sequence[ResultPage], failures: Iterable[str] = ()) -> str:
    """The site's index: the gate's outcome, its failures in words and one row per validation result."""
    template = html_templates("kafkaops.platform").get_template("datadocs_index.html.j2")
    return template.render(gate=gate, results=results, failures=list(failures),
                           ok=all(r.success for r in results))


class _Links(HTMLParser):
    """The local files a page links to (``src`` and ``href`` that are neither remote nor anchors)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value and not _remote(value) and ":" not in value \
                    and not value.startswith("#"):
                self.urls.add(value.split("#", 1)[0].split("?", 1)[0])


def linked_files(site: Path) -> set[Path]:
    """The files of ``site`` its pages link to."""
    found: set[Path] = set()
    for page in site.rglob("*.html"):
        links = _Links()
        links.feed(page.read_text(encoding="utf-8"))
        links.close()
        found |= {(page.parent / url).resolve() for url in links.urls}
    return found


def make_offline(site: Path, gate: str, results: Sequence[ResultPage], failures: Iterable[str] = ()) -> None:
    """Rewrite the Data Docs site at ``site`` to read offline: each page by :func:`offline_page`,
    the index by :func:`index_page`; the files under ``static/`` no page links to are removed."""
    for page in site.rglob("*.html"):
        page.write_text(offline_page(page.read_text(encoding="utf-8")), encoding="utf-8")
    (site / "index.html").write_text(index_page(gate, results, failures), encoding="utf-8")
    used = linked_files(site)
    static = site / "static"
    for path in sorted(static.rglob("*"), reverse=True) if static.is_dir() else ():
        if path.is_file() and path.resolve() not in used:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def relative(site: Path, url: str) -> str:
    """A page's URL as GX gives it (``file://`` + path) relative to the site."""
    return Path(url.removeprefix("file://")).resolve().relative_to(site.resolve()).as_posix()
