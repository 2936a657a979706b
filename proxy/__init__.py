"""The git smart-HTTP push proxy: a sandbox may fetch its repository and push its branch.

See docs/push-proxy.md for what it enforces and the messages git prints.
"""

from .grant import Grant
from .policy import Decision, decide, sensitive_paths
from .routes import Upstream, setup_proxy
from .sandbox_files import sandbox_git_files
from .tokens import PushRecord, TokenRegistry

__all__ = [
    "Decision",
    "Grant",
    "PushRecord",
    "TokenRegistry",
    "Upstream",
    "decide",
    "sandbox_git_files",
    "sensitive_paths",
    "setup_proxy",
]
