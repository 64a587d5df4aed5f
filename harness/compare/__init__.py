"""Strict comparison of runs and evaluations (spec §6.3): the conditions first, then figures with intervals.

:mod:`harness.compare.conditions` (the strict conditions), :mod:`harness.compare.across_models` (the conditions of a
model comparison), :mod:`harness.compare.decide` (the rule: same / differs / inconclusive by equivalence, Holm),
:mod:`harness.compare.figures` (figures side by side and the exit codes), :mod:`harness.compare.runs` (``hitch run
compare``) and :mod:`harness.compare.evals` (``hitch eval compare``). Import the submodule you need: the CLI's help
reads the exit codes alone (here, importing nothing) and a comparison imports the rest when it runs.
"""

__all__ = ["DIFFERS_EXIT_CODE", "INCONCLUSIVE_EXIT_CODE"]

# the exit of a comparison by its verdict (0: reproduced); named in the commands' help
DIFFERS_EXIT_CODE = 10
INCONCLUSIVE_EXIT_CODE = 11
