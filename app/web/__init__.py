"""hangar's web face: the webhook route, health and metrics (webhook.py); the REST API
(api/, one file per resource) and the MCP server in front of it (mcp.py); the fleet page
(fleet.py), a job's page (jobpage.py), sign-in with GitHub (signin.py) and /metrics'
gauges (gauges.py); the setup pages that register the GitHub App (setup.py,
registration.py); API tokens and the audit trail (access.py); and the sandbox gate, the
second application sandboxes reach (sandbox_gate.py, upstream.py). The typed keys of what
the application holds: keys.py."""
