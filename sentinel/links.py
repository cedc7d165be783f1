"""Where a repository's source can be linked: its GitHub address, read from its remote.

Used by the views (source locations as links to the exact commit) and by export (the bundle's
links); a git fact, so neither depends on the other for it.
"""

from __future__ import annotations

import re
from functools import lru_cache

_GITHUB = re.compile(r"github\.com[:/]+([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


@lru_cache(maxsize=64)
def github_url(repo: str) -> str | None:
    """`https://github.com/owner/name` when the repository at `repo` has its remote (origin,
    else the first) on GitHub; None for any other remote, no remote, or no repository."""
    try:
        import git
        r = git.Repo(repo)
        remotes = list(r.remotes)
        remote = next((x for x in remotes if x.name == "origin"), remotes[0] if remotes else None)
        url = remote.url if remote is not None else ""
    except Exception:  # noqa: BLE001 - no git, no repository, unreadable config: plain text then
        return None
    m = _GITHUB.search(url)
    return f"https://github.com/{m.group(1)}/{m.group(2)}" if m else None
