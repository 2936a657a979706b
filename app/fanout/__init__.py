"""Fan-out: `/hangar try N` runs N attempts of one job side by side; once all have
finished they are ranked (verification, CI, size of the change), and `/hangar pick N`
keeps one and closes the other attempts' pull requests. The ranking is advice; a person
picks.

Which file holds what:
- ranking.py: the pure ranking and the CI verdict it reads;
- steps.py: ranking a job's attempts once every run has finished (the engine asks,
  app/wiring.py registers it), and runs started by hand (the API's rank);
- commands.py: try and pick.

Code outside this folder uses the concern through the names below.
"""

from app.fanout.commands import ACTIONS, FanoutWarning
from app.fanout.ranking import Ranked, ci_verdict, rank
from app.fanout.steps import rank_attempts, ranking_of

__all__ = ["ACTIONS", "FanoutWarning", "Ranked", "ci_verdict", "rank", "rank_attempts",
           "ranking_of"]
