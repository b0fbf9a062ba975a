"""File templates for ``llmgym init`` (read with importlib.resources; see :mod:`llmgym.scaffold`)."""
