"""Importing a package as a fresh interpreter would, in this process.

``fresh_import(["steerboard_agents"], absent=["openai"])`` forgets the package's modules
(and those of ``absent``), then, while the block runs, records every import of an
``absent`` package and refuses it as an uninstalled one would be (``ImportError``). What
the block imports of ``packages`` is forgotten again after it, and ``sys.modules`` holds
the modules it held before: the rest of the run keeps its one copy of each."""
import importlib.abc
import sys
from contextlib import contextmanager


def _top(name: str) -> str:
    return name.split(".")[0]


class _Absent(importlib.abc.MetaPathFinder):
    def __init__(self, absent: set[str]):
        self.absent = absent
        self.attempted: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if _top(name) in self.absent:
            self.attempted.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (absent in this test)", name=name)
        return None


@contextmanager
def fresh_import(packages, absent=()):
    """Yields the list of the ``absent`` modules something tried to import."""
    packages, absent = set(packages), set(absent)
    forget = packages | absent
    saved = {name: module for name, module in sys.modules.items() if _top(name) in forget}
    for name in saved:
        del sys.modules[name]
    finder = _Absent(absent)
    sys.meta_path.insert(0, finder)
    try:
        yield finder.attempted
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _top(n) in forget]:
            del sys.modules[name]
        sys.modules.update(saved)
