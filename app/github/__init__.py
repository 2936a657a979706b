"""hangar's GitHub: the App's authentication and a REST client that keeps within
GitHub's limits (client.py), idempotent operations on one repository (ops.py), what steps
read through them with permissions, config and branch protection kept (reads.py), and one
vocabulary for CI results (ci.py)."""
