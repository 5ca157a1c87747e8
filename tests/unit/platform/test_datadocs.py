"""Data Docs made readable offline (pure): what a page loses and keeps, and the static index."""
from __future__ import annotations

from kafkaops.platform import datadocs

PAGE = """<!DOCTYPE html>
<html>
  <head>
    <link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
    <style>.navbar-brand a { background: url('https://example.com/logo.png') }</style>
    <script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>
    <link rel="shortcut icon" href="./static/images/favicon.ico" type="image/x-icon"/>
  </head>
  <body>
    <a href="index.html"><img src="https://example.com/logo-long.png" alt="Great Expectations"/></a>
    <script>
      if (a < b) { $(".x").html("</div>"); }
    </script>
    <img src="static/images/local.gif" alt="local">
    <p>values must belong to this set: <i class="fas fa-check-circle text-success"></i> &amp; more</p>
  </body>
</html>
"""


def test_a_page_loses_scripts_stylesheets_and_remote_images_and_gets_our_style() -> None:
    page = datadocs.offline_page(PAGE, style="p { color: red }")
    assert "http" not in page and "<script" not in page and "stylesheet" not in page
    assert page.count("<style>") == 1 and "<style>p { color: red }</style>\n</head>" in page
    # everything else stays byte for byte: the favicon, the local image, entities, the link around the logo
    assert '<link rel="shortcut icon" href="./static/images/favicon.ico" type="image/x-icon"/>' in page
    assert '<img src="static/images/local.gif" alt="local">' in page
    assert '<p>values must belong to this set: <i class="fas fa-check-circle text-success"></i> &amp; more</p>' in page
    assert '<a href="index.html"></a>' in page


def test_a_fragment_without_a_head_gets_the_style_first() -> None:
    assert datadocs.offline_page("<p>x</p>", style="s") == "<style>s</style>\n<p>x</p>"


def test_the_index_lists_each_result_with_its_outcome_and_links() -> None:
    results = [datadocs.ResultPage("brokers", "preflight.brokers", False, 1, 0, 3,
                                   "validations/preflight/brokers/r/kafkaops-brokers.html",
                                   "expectations/preflight/brokers.html"),
               datadocs.ResultPage("cluster", "preflight.cluster", True, 2, 2, 1,
                                   "validations/preflight/cluster/r/kafkaops-cluster.html")]
    html = datadocs.index_page("preflight", results, ["preflight: broker 3 offline <b>"])
    assert "<h1>Data Docs: gate preflight</h1>" in html and '<span class="bad">failed</span></p>' in html
    assert "<li>preflight: broker 3 offline &lt;b&gt;</li>" in html  # escaped
    assert '<a href="validations/preflight/brokers/r/kafkaops-brokers.html">preflight.brokers results</a>' in html
    assert '<a href="expectations/preflight/brokers.html">expectations</a>' in html
    assert "<script" not in html and "http" not in html


def test_make_offline_keeps_only_the_static_files_a_page_links_to(tmp_path) -> None:
    site = tmp_path / "site"
    for name, body in {"static/images/favicon.ico": "ico", "static/images/local.gif": "gif",
                       "static/images/unused.gif": "big", "static/fonts/HK/font.otf": "font",
                       "static/styles/unused.css": "css"}.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(body)
    (site / "validations" / "r").mkdir(parents=True)
    (site / "validations" / "r" / "page.html").write_text(PAGE.replace("./static", "../../static")
                                                          .replace('"static/', '"../../static/'))
    datadocs.make_offline(site, "preflight", [])
    kept = sorted(p.relative_to(site).as_posix() for p in site.rglob("*"))
    assert kept == ["index.html", "static", "static/images", "static/images/favicon.ico",
                    "static/images/local.gif", "validations", "validations/r", "validations/r/page.html"]
