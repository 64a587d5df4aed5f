"""Agent harnesses on a local model: model-call (one Responses request) and the pinned Codex CLI, their
compatibility profiles and the evidence each run writes (``hitch run``)."""
