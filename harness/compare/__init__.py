"""Strict comparison of runs and evaluations (spec §6.3): the conditions first, then figures with intervals.

:mod:`harness.compare.conditions` (the strict conditions), :mod:`harness.compare.across_models` (the conditions of a
model comparison), :mod:`harness.compare.decide` (the rule: same / differs / inconclusive by equivalence, Holm),
:mod:`harness.compare.figures` (figures side by side and the exit codes), :mod:`harness.compare.runs` (``hitch run
compare``) and :mod:`harness.compare.evals` (``hitch eval compare``). Import the submodule you need: the CLI imports the
figures alone at start and the rest when a comparison runs.
"""
