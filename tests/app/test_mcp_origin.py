"""MCP over HTTP checks `Origin`, as the MCP specification requires against DNS
rebinding: absent (not a browser), loopback, hangar's public URL or a configured origin
pass; anything else is refused with 403 before the token is even looked at."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.web.mcp_http import origin_allowed

SETTINGS = SimpleNamespace(public_url="https://hangar.example.com",
                           mcp_allowed_origins=["https://console.example.org:8443"])


@pytest.mark.parametrize(("origin", "allowed"), [
    (None, True),
    ("http://localhost:3000", True),
    ("http://app.localhost", True),
    ("http://127.0.0.1:8787", True),
    ("http://127.8.9.1", True),
    ("http://[::1]:8080", True),
    ("https://hangar.example.com", True),
    ("https://hangar.example.com:443", True),
    ("https://HANGAR.example.com", True),
    ("https://console.example.org:8443", True),
    ("https://console.example.org", False),  # another port: another origin
    ("http://hangar.example.com", False),  # another scheme
    ("https://evil.example", False),
    ("http://localhost.evil.example", False),
    ("http://127.0.0.1.evil.example", False),
    ("http://10.0.0.5", False),
    ("null", False),
    ("file://", False),
    ("", False),
    ("http://[::1", False),
])
def test_which_origins_may_use_mcp(origin, allowed):
    assert origin_allowed(origin, SETTINGS) is allowed
