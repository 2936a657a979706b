"""Fan-out: `/hangar try N` runs N attempts of one job side by side; once all have
finished they are ranked (verification, CI, size of the change), and `/hangar pick N`
keeps one and closes the other attempts' pull requests. The ranking is advice; a person
picks.

Which file holds what:
- ranking.py: the pure ranking and the CI verdict it reads;
- steps.py: ranking a job's attempts once every run has finished (the engine asks,
  plugin.py registers it), after grading waited for their CI, and runs started by
  hand (the API's rank);
- grading.py: the row that waits for the repository's CI on the attempts' heads, and
  the intake CI events wake it through (handlers/fanout.py);
- commands.py: try and pick;
- plugin.py: `register(engine)`: the grading row, the commands, the ranking at the end.

Code outside this folder uses the concern through the names below.
"""

from app.fanout.commands import FanoutWarning
from app.fanout.grading import Grading, on_ci
from app.fanout.plugin import register
from app.fanout.ranking import ci_verdict, rank
from app.fanout.steps import advance_grading, rank_attempts, ranking_of

__all__ = [
    "FanoutWarning",
    "Grading",
    "advance_grading",
    "ci_verdict",
    "on_ci",
    "rank",
    "rank_attempts",
    "ranking_of",
    "register",
]
