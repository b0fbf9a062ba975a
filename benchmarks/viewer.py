"""``llmgym view`` on a large episodes file: time to the first page, to the whole index, filters, search, memory.

Writes a file of N episodes (default 100,000) built from real scripted-Wordle episodes
(the rollout engine plays 200, then they are repeated with new seeds), then measures, each
in a fresh process so that peak memory is that of one job:

- the viewer: time until the first page of 50 rows is served (indexing runs in the
  background and the page is answered as soon as its rows are read), the whole index,
  a filter + sort over all episodes, a transcript text search, peak RSS;
- the reference, side by side: ``llmgym.episode.load_jsonl`` of the whole file (what a
  page that loads everything has to do first), its time and peak RSS.

    python benchmarks/viewer.py [--episodes 100000] [--out benchmarks/results/viewer.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "viewer.json"


def write_file(path: Path, episodes: int) -> None:
    """``episodes`` lines: 200 real scripted-Wordle episodes, repeated with fresh seeds."""
    import llmgym  # noqa: F401  (registers the envs)
    from llmgym.rollout import rollout
    from llmgym.wrappers.scripted import load_scripted

    played = rollout("llmgym/Wordle-v0", load_scripted("wordle"), seeds=100, group_size=2, max_concurrency=16)
    with open(path, "w", encoding="utf-8") as file:
        for i in range(episodes):
            episode = played[i % len(played)]
            file.write(dataclasses.replace(episode, seed=i // 2, group=i // 2).to_json() + "\n")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_viewer(path: str) -> dict[str, float]:
    from llmgym.viewer.index import EpisodeIndex, Query

    start = time.perf_counter()
    index = EpisodeIndex(path).start()
    while len(index) < 50 and index.indexing:
        time.sleep(0.001)
    first = index.page(Query(limit=50))
    first_page_s = time.perf_counter() - start
    assert len(first["rows"]) == 50
    index.wait()
    indexed_s = time.perf_counter() - start
    indexed_rss = peak_rss_mb()
    t = time.perf_counter()
    filtered = index.page(Query(min_reward=1.4, component="speed", component_min=0.5, sort="reward", descending=True))
    filter_s = time.perf_counter() - t
    t = time.perf_counter()
    searched = index.page(Query(text="solved in 5"))
    search_s = time.perf_counter() - t
    t = time.perf_counter()
    index.episode(len(index) - 1)
    open_last_s = time.perf_counter() - t
    return {
        "episodes": len(index),
        "first_page_s": first_page_s,
        "index_s": indexed_s,
        "filter_sort_s": filter_s,
        "filter_matches": filtered["total"],
        "search_s": search_s,
        "search_matches": searched["total"],
        "open_last_episode_s": open_last_s,
        "peak_rss_mb_indexed": indexed_rss,
        "peak_rss_mb": peak_rss_mb(),
    }


def measure_imports(path: str) -> dict[str, float]:
    """The fixed cost both jobs share: Python with llmgym's episode and viewer modules imported."""
    import llmgym.episode  # noqa: F401
    import llmgym.viewer.index  # noqa: F401

    return {"peak_rss_mb": peak_rss_mb()}


def measure_load_all(path: str) -> dict[str, float]:
    from llmgym.episode import load_jsonl

    start = time.perf_counter()
    episodes = load_jsonl(path)
    return {"episodes": len(episodes), "load_s": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb()}


def _in_process(function: str, path: str) -> dict[str, float]:
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import viewer; "
    code += f"print(json.dumps(viewer.{function}({path!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "episodes.jsonl"
        write_file(path, args.episodes)
        size_mb = path.stat().st_size / 2**20
        baseline = _in_process("measure_imports", str(path))
        viewer = _in_process("measure_viewer", str(path))
        load_all = _in_process("measure_load_all", str(path))
    result = {
        "benchmark": "viewer",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}",
        "file": {"episodes": args.episodes, "megabytes": round(size_mb, 1)},
        "imports_only": baseline,
        "viewer": viewer,
        "load_everything": load_all,
        "ratios": {
            "first_page_vs_load_everything": viewer["first_page_s"] / load_all["load_s"],
            "peak_rss_vs_load_everything": viewer["peak_rss_mb"] / load_all["peak_rss_mb"],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
