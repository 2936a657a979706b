"""The few HTML pages hangar serves: one layout, everything escaped, readable on a phone."""

from __future__ import annotations

from html import escape

from aiohttp import web

STYLE = """
body{font:15px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#1f2328;
background:#f6f8fa}
main{max-width:60rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
section,form.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:.75rem;
margin-bottom:1rem;overflow-x:auto}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .5rem;
border-bottom:1px solid #eaeef2;vertical-align:top}th{font-weight:600;font-size:.85rem;
color:#57606a}
.ok{color:#1a7f37}.bad{color:#cf222e}.wait{color:#9a6700}.muted{color:#57606a}
label{display:block;margin:.5rem 0 .2rem;font-weight:600}
input[type=text],input[type=url],input[type=password]{width:100%;max-width:32rem;
padding:.4rem;font:inherit;box-sizing:border-box}
button{font:inherit;padding:.5rem 1rem;border-radius:6px;border:1px solid #1f883d;
background:#1f883d;color:#fff;cursor:pointer;margin-top:.6rem}
button.plain{background:#f6f8fa;color:#1f2328;border-color:#d0d7de}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:.5rem}
code{font-size:.9em}
"""


def page(title: str, body: str, *, status: int = 200,
         headers: dict[str, str] | None = None) -> web.Response:
    """A whole page; `body` must already be built from escaped parts."""
    text = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body><main>{body}</main></body></html>"
    )
    return web.Response(text=text, content_type="text/html", charset="utf-8", status=status,
                        headers={"Cache-Control": "no-store",
                                 "Content-Security-Policy": "default-src 'none'; "
                                 "style-src 'unsafe-inline'; img-src 'self' data:; "
                                 "form-action *; frame-ancestors 'none'",
                                 "X-Content-Type-Options": "nosniff",
                                 **(headers or {})})


def link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def table(headings: list[str], rows: list[list[str]]) -> str:
    """A table of cells that are already HTML (escape text with `escape` first)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


__all__ = ["escape", "link", "page", "table"]
