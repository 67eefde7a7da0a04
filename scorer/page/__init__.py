"""The explain page: one HTML file, its stylesheet and its script, shipped in the package.

No framework, no CDN: the page works offline and behind a port-forward or `kubectl proxy`
(every URL in it is relative). It renders the `/explain` JSON answers in the browser, so it
shows exactly what the JSON and the CLI show (the view model, scorer/explain/view/); it
derives nothing itself. scorer/app.py serves it at `/`, its files at `/ui/NAME`.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

# The page's files and their media types; nothing else under scorer/page/ is served.
ASSETS = {
    "index.html": "text/html",
    "page.css": "text/css",
    "page.js": "text/javascript",
}


@cache
def page_asset(name: str) -> tuple[bytes, str] | None:
    """A page file's bytes and media type, or None for a name that is not one."""
    mimetype = ASSETS.get(name)
    if mimetype is None:
        return None
    return files(__name__).joinpath(name).read_bytes(), mimetype
