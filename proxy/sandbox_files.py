"""The git configuration that routes a sandbox's plain `git clone`/`git push` via the proxy."""

from __future__ import annotations

from urllib.parse import quote, urlsplit


def sandbox_git_files(
    proxy_base_url: str,
    sandbox_id: str,
    token: str,
    clone_url: str,
    home: str = "/workspace/home",
) -> dict[str, bytes]:
    """Files to copy into a sandbox: `<home>/.gitconfig` and `<home>/.git-credentials`.

    The config rewrites the git host of `clone_url` (e.g. `https://github.com/`) to
    `<proxy>/git/<sandbox_id>/` and stores the `hgs_` token as the proxy's credential,
    so `git clone <clone_url>` and `git push origin` go through the proxy. The caller
    must write `.git-credentials` with mode 0600 (and owned by the sandbox user); git's
    store helper expects that and other users must not read it.
    """
    parts = urlsplit(clone_url)
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"clone_url must be an http(s) URL, got {clone_url!r}")
    path = parts.path.rstrip("/")
    # The git base is everything before /<owner>/<repo>(.git).
    segments = path.split("/")
    if len(segments) < 3:
        raise ValueError(f"clone_url must end in /<owner>/<repo>.git, got {clone_url!r}")
    base_path = "/".join(segments[:-2])
    git_base = f"{parts.scheme}://{parts.netloc}{base_path}/"
    proxy = proxy_base_url.rstrip("/")
    proxy_prefix = f"{proxy}/git/{quote(sandbox_id, safe='')}/"
    proxy_parts = urlsplit(proxy)
    credential_url = f"{proxy_parts.scheme}://x-hangar:{quote(token, safe='')}@{proxy_parts.netloc}"
    home = home.rstrip("/")
    gitconfig = (
        f'[url "{proxy_prefix}"]\n'
        f"\tinsteadOf = {git_base}\n"
        "[credential]\n"
        f"\thelper = store --file {home}/.git-credentials\n"
    )
    return {
        f"{home}/.gitconfig": gitconfig.encode(),
        f"{home}/.git-credentials": (credential_url + "\n").encode(),
    }
