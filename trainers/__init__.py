"""Trainers (imports as ``llmgym.trainers``): GRPO with turn-level credit, SFT warm-up."""
