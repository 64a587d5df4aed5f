"""Agent evaluations on a local model (Harbor): the pinned tool's install, its task set, its trials."""
