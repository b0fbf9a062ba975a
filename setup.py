"""Maps envs/, wrappers/ and trainers/ into the llmgym namespace (all else is in pyproject.toml).

They live at the top of the repo but import as llmgym.envs, llmgym.wrappers
and llmgym.trainers; every subpackage under them is found automatically.
"""

from setuptools import find_packages, setup

PACKAGE_DIRS = {"llmgym": "llmgym", "llmgym.envs": "envs", "llmgym.wrappers": "wrappers", "llmgym.trainers": "trainers"}
packages = [f"{name}.{sub}" for name, folder in PACKAGE_DIRS.items() for sub in find_packages(folder)]
setup(packages=sorted([*PACKAGE_DIRS, *packages]), package_dir=PACKAGE_DIRS)
