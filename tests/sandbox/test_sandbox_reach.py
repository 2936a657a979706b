"""What a sandbox of a running hangar can reach: the sandbox gate's `/git/` and nothing
else — not hangar's webhook, API or metrics, not another service on the host's loopback.

hangar runs for real (its own thread and loop, its real listeners); the sandboxes are the
engine's own providers, so the gate, the relay and the network setup are the shipped ones,
used on hangar's own loop as hangar uses them.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from sandbox_helpers import docker_reason, spec_for

from app.service import ServiceThread
from app.settings import Settings
from app.web.keys import ENGINE
from sandbox.provider import ExecResult
from tests.e2e.conftest import free_port

# Prints one line per probe: "<path> <status>" or "<path> refused <error>".
PROBE = r"""
import sys, urllib.request, urllib.error
host = sys.argv[1]
for path in sys.argv[2:]:
    method = "POST" if path in ("/webhook", "/api/jobs") else "GET"
    req = urllib.request.Request(host + path, data=b"{}" if method == "POST" else None,
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            print(path, r.status)
    except urllib.error.HTTPError as e:
        print(path, e.code)
    except OSError as e:
        print(path, "refused", type(e).__name__)
"""
GIT = "/git/sb-nobody/acme/widgets.git/info/refs?service=git-upload-pack"


@pytest.fixture
def hangar(tmp_path: Path) -> ServiceThread:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "app.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    # Port 9 on loopback refuses: nothing here reaches a GitHub.
    settings = Settings(app_id=1, private_key_file=pem, webhook_secret="s",
                        data_dir=tmp_path / "data", github_url="http://127.0.0.1:9/api/v3",
                        port=free_port(), sandbox_port=free_port(), api_token="t" * 32,
                        shutdown_grace_seconds=0.5)
    service = ServiceThread(settings).start()
    yield service
    service.stop()


@pytest.fixture(params=[pytest.param("local", marks=pytest.mark.bwrap),
                        pytest.param("docker", marks=pytest.mark.docker)])
def provider_name(request) -> str:
    """Each provider whose sandboxes reach hangar over loopback, skipped where it cannot run."""
    if request.param == "docker" and docker_reason():
        pytest.skip(docker_reason())
    return request.param


async def _probe(provider, sb, port: int, paths: list[str]) -> dict[str, str]:
    result = await provider.run(
        sb, ["python3", "-I", "-c", PROBE, f"http://127.0.0.1:{port}", *paths], timeout=60)
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in result.output.splitlines()
            if line.startswith("/")}


async def test_a_sandbox_reaches_the_git_proxy_and_nothing_else(hangar, provider_name):
    port = hangar.settings.port
    # hangar's own listener answers these (proof that they exist to be refused).
    seen_from_host = await asyncio.to_thread(_host_probe, port,
                                             ["/webhook", "/api/jobs", "/metrics", GIT])
    # ...and only the gate serves the push proxy.
    assert seen_from_host == {"/webhook": "401", "/api/jobs": "401", "/metrics": "200",
                              GIT: "404"}
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen(1)
    provider = hangar.app[ENGINE].providers[provider_name]

    async def probes() -> tuple[dict[str, str], dict[str, str]]:
        sb = await provider.create(spec_for(provider_name, network="loopback"),
                                   {"hangar.test": "1"})
        try:
            return (await _probe(provider, sb, port, ["/webhook", "/api/jobs", "/metrics",
                                                      "/healthz", GIT]),
                    await _probe(provider, sb, other.getsockname()[1], ["/"]))
        finally:
            await provider.destroy(sb)

    try:
        seen, elsewhere = await hangar.on_loop(probes())
    finally:
        other.close()
    # The gate serves only /git/: hangar's own routes do not exist there.
    assert seen["/webhook"] == seen["/api/jobs"] == seen["/metrics"] == "404", seen
    assert seen["/healthz"] == "404", seen
    # The proxy answers (and refuses a sandbox without a token).
    assert seen[GIT] in ("401", "403"), seen
    # Another service on the host's loopback is out of reach.
    assert elsewhere["/"].startswith("refused"), elsewhere


async def test_the_gates_tcp_port_serves_sandbox_routes_only(hangar):
    """What kubernetes sandboxes reach (their NetworkPolicy allows only sandbox_port)."""
    seen = await asyncio.to_thread(_host_probe, hangar.settings.sandbox_port,
                                   ["/webhook", "/api/jobs", "/metrics", "/healthz", GIT])
    assert seen == {"/webhook": "404", "/api/jobs": "404", "/metrics": "404",
                    "/healthz": "404", GIT: seen[GIT]}, seen
    assert seen[GIT] in ("401", "403"), seen


def _host_probe(port: int, paths: tuple[str, ...] = ("/webhook", "/api/jobs", "/metrics"),
                ) -> dict[str, str]:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-I", "-c", PROBE, f"http://127.0.0.1:{port}",
                          *paths], capture_output=True, text=True, timeout=60).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()}


# In the sandbox, with hangar's proxy variables: plain HTTP and a CONNECT tunnel to an
# allowed host, three tries at a host outside the allowlist, and two connections that
# ignore the proxy variables. One line per probe.
EGRESS_PROBE = r"""
import base64, os, socket, sys, urllib.parse, urllib.request
allowed = sys.argv[1]
def line(name, fn):
    try:
        print(name, fn())
    except Exception as e:
        print(name, "refused", type(e).__name__, str(e)[:120].replace(chr(10), " "))
def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return f"{r.status} {r.read().decode()}"
def tunnel():
    proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(f"CONNECT {allowed} HTTP/1.1\r\nHost: {allowed}\r\n"
              f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
    head = s.recv(4096)
    s.sendall(b"GET /tunnelled HTTP/1.0\r\nHost: x\r\n\r\n")
    body = b"".join(iter(lambda: s.recv(4096), b""))
    return head.split(b"\r\n")[0].decode() + " | " + body.split(b"\r\n\r\n", 1)[-1].decode()
def direct(host, port):
    socket.create_connection((host, port), timeout=5).close()
    return "connected"
line("plain", lambda: get(f"http://{allowed}/plain"))
line("tunnel", tunnel)
for i in range(3):
    line(f"blocked{i}", lambda: get("https://example.org/"))
line("direct-origin", lambda: direct("127.0.0.1", int(allowed.rsplit(":", 1)[1])))
line("direct-public", lambda: direct("93.184.216.34", 443))
"""


async def test_egress_goes_through_hangars_proxy_or_nowhere(hangar, provider_name):
    from app.web.keys import EGRESS
    from tests.loopback_origin import loopback_origin

    with loopback_origin() as port:
        allowed = f"registry.test:{port}"
        output, seen = await _run_with_egress(
            hangar, provider_name, ["python3", "-I", "-c", EGRESS_PROBE, allowed],
            run_id="run-egress", allow=allowed)
    assert seen.get("plain") == "200 origin /plain", output
    assert seen.get("tunnel") == ("HTTP/1.1 200 Connection established | "
                                  "origin /tunnelled"), output
    for i in range(3):
        assert seen[f"blocked{i}"].startswith("refused") and "403" in seen[f"blocked{i}"]
    # Processes that ignore the proxy variables reach nothing at all.
    assert seen["direct-origin"].startswith("refused"), seen
    assert seen["direct-public"].startswith("refused"), seen
    blocked = hangar.app[EGRESS].blocked("run-egress")
    assert [(b.host, b.port, b.count) for b in blocked] == [("example.org", 443, 3)]


async def _run_with_egress(hangar, provider_name: str, argv: list[str], *, run_id: str,
                           allow: str) -> tuple[str, dict[str, str]]:
    """argv in a fresh sandbox with hangar's proxy variables and an egress token that allows
    `allow` only. The operator pinned registry.test to loopback: the only way to a private
    address. Returns the output and its lines as {first word: the rest}."""
    from app.web.keys import EGRESS
    from proxy.egress import proxy_env

    provider = hangar.app[ENGINE].providers[provider_name]

    async def run() -> ExecResult:
        sb = await provider.create(spec_for(provider_name, network="loopback"),
                                   {"hangar.test": "1"})
        try:
            token = hangar.app[EGRESS].issue(sb.id, run_id=run_id, allow=[allow],
                                             hosts={"registry.test": "127.0.0.1"})
            env = proxy_env(hangar.settings.proxy_base_url, sb.id, token)
            return await provider.run(sb, argv, env=env, timeout=120)
        finally:
            await provider.destroy(sb)

    result = await hangar.on_loop(run())
    return result.output, dict(line.split(" ", 1) for line in result.output.splitlines()
                               if " " in line)


# In the sandbox: a real TLS session to an allowlisted HTTPS origin, through the CONNECT
# tunnel that HTTPS_PROXY names, trusting only the origin's own certificate (SSL_CERT_FILE,
# read by OpenSSL when the default context is made). Then the same name without that trust,
# which must fail the handshake: the tunnel carries the origin's certificate, not a proxy's.
TLS_PROBE = r"""
import os, ssl, sys, tempfile, urllib.request
url, pem = sys.argv[1], sys.argv[2]
path = os.path.join(tempfile.mkdtemp(), "origin.pem")
open(path, "w").write(pem)
os.environ["SSL_CERT_FILE"] = path
try:
    with urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=10) as r:
        print("trusted", r.status, r.read().decode())
except Exception as e:
    print("trusted refused", type(e).__name__, str(e)[:160].replace(chr(10), " "))
os.environ["SSL_CERT_FILE"] = os.devnull
try:
    urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=10)
    print("untrusted connected")
except Exception as e:
    print("untrusted refused", type(e).__name__, str(e)[:160].replace(chr(10), " "))
"""


async def test_a_tls_session_runs_through_the_connect_tunnel(hangar, provider_name):
    from app.web.keys import EGRESS
    from tests.loopback_origin import loopback_tls_origin

    with loopback_tls_origin("registry.test") as (port, pem):
        output, seen = await _run_with_egress(
            hangar, provider_name,
            ["python3", "-I", "-c", TLS_PROBE, f"https://registry.test:{port}/tls", pem],
            run_id="run-tls", allow=f"registry.test:{port}")
    assert seen.get("trusted") == "200 origin /tls", output
    assert seen.get("untrusted", "").startswith("refused"), output
    assert "CERTIFICATE_VERIFY_FAILED" in seen["untrusted"], output
    assert hangar.app[EGRESS].blocked("run-tls") == []
