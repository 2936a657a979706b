"""A repository's rows follow GitHub: renamed, transferred or taken out of the
installation, and rebuilt from what GitHub remembers when hangar's database is new.

- moves.py    a repository renamed or transferred, or its account renamed, keeps its rows
              under its new name; one
              removed from the installation, or the App suspended or uninstalled,
              stops its work
- rebuild.py  GitHub is the backup: jobs, runs and land requests recovered from hangar's
              own pull requests, status comments and check runs
- plugin.py   `register(engine)`: the rebuild, a chore while one is owed
- context.py  `RepositoriesContext`: what the moves and the rebuild use of the engine,
              and nothing more (the rebuild's chore takes the whole StepContext)

This file is the concern's face: code outside the folder imports from here only.
"""

from app.repositories.moves import (
    account_renamed,
    installation_ended,
    installation_usable,
    repositories_added,
    repositories_removed,
    repository_moved,
)
from app.repositories.plugin import register

__all__ = [
    "account_renamed",
    "installation_ended",
    "installation_usable",
    "register",
    "repositories_added",
    "repositories_removed",
    "repository_moved",
]
