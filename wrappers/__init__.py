"""Gymnasium wrappers and policy adapters (imports as ``llmgym.wrappers``).

Each adapter lives in its own module and is imported from there, so a
missing optional extra only affects the adapter that needs it.
"""
