"""``llmgym view``: a local web page for reading episodes, comparing runs and following training.

The modules:

- :mod:`~llmgym.viewer.index`: :class:`EpisodeIndex`, a byte-offset index over an episodes
  JSONL file (table rows, filters, sorting, transcript search) that never loads the file;
- :mod:`~llmgym.viewer.sources`: :class:`Viewer`, what a path holds (episodes file, eval
  folder, training run folder) and the comparison of two;
- :mod:`~llmgym.viewer.safe_json`: reading JSON from any file (too deep refused, ``NaN``
  as ``None``) and making any value sendable as strict JSON;
- :mod:`~llmgym.viewer.app`: the FastAPI app on 127.0.0.1 and the self-contained HTML
  export (FastAPI is imported only by :func:`~llmgym.viewer.app.create_app`).

The page itself is ``static/app.js`` (plain JavaScript) with uPlot (vendored) for curves.
"""

from llmgym.viewer.index import EpisodeIndex, Query
from llmgym.viewer.sources import Viewer, ViewerError, open_source

__all__ = ["EpisodeIndex", "Query", "Viewer", "ViewerError", "open_source"]
