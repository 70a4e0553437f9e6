"""Case-insensitive "the text contains this", the same on both databases (the
operators' message search ``q``, docs/api.md).

PostgreSQL: ``strpos(UPPER(content), UPPER(q)) > 0``, which folds every letter the
database's LC_CTYPE knows (C.UTF-8 or a language locale), as Django's ``icontains``
(``UPPER(content) LIKE UPPER('%q%')``) did. Not LIKE: the planner guesses that a
``'%…%'`` pattern matches a fixed small share per letter, almost nothing, so for a
common word it read every message of the sender or the team and sorted them instead of
walking the newest-first index until the page is full (at a million stored messages,
90–135 ms for the operators' filtered first page against a fraction of a millisecond).
A function's result it guesses true for a third of the rows, which makes it walk.

SQLite's ``LIKE`` folds ASCII letters only, and so do its ``lower()`` and
``upper()`` without ICU: ``ÜNÏ`` missed "ünïcödé". There the text must match
two patterns, both in SQLite's own C code (no Python call per row, no other
index, the same walk and plan as before):

- ``GLOB``, which compares characters exactly, on a pattern that lists each
  letter of ``q`` in all its cases: ``ÜNÏ`` is ``*[Üü][Nn][Ïï]*``. Two
  characters match when their Unicode case folds are equal (``k``, ``K`` and
  the Kelvin sign; ``σ``, ``ς`` and ``Σ``; ``ß`` and ``ẞ``). A fold of several
  characters is not expanded (``ß`` does not match ``ss``), as PostgreSQL's
  ``UPPER`` does not either.
- First, ``LIKE`` on a looser pattern that every GLOB match also matches: the
  characters LIKE compares rightly as they are (ASCII letters, whose case it
  folds, and characters without a case), every other one ``_`` (``ÜNÏ`` is
  ``%_N_%``). SQLite scans for a literal far faster than it tries a class at
  every position, so the GLOB runs only on the rows this lets through: an ASCII
  ``q`` costs what LIKE alone did, a word with a few ASCII letters about as
  much. A ``q`` whose every character is a non-ASCII letter (``σοφία``) lets
  everything through, and costs a few times more per row walked
  (bench/search.py has the figures).
"""
import functools
from collections import defaultdict

from django.db.models.lookups import IContains

# Every character with a case lies below here (tests/mailbox/test_text_match.py checks it).
_CASED_BELOW = 0x20000
_GLOB_SPECIAL = frozenset("*?[]")


@functools.cache
def _cases() -> dict[str, frozenset[str]]:
    """Each case fold that several characters share: those characters (built once per
    process, at its first search: about 30 ms)."""
    found: dict[str, set[str]] = defaultdict(set)
    for code in range(_CASED_BELOW):
        char = chr(code)
        folded = char.casefold()
        if folded != char:
            found[folded].add(char)
            if len(folded) == 1:
                found[folded].add(folded)
    return {folded: frozenset(chars) for folded, chars in found.items()}


def glob_pattern(text: str) -> str:
    """A GLOB pattern that matches what contains ``text`` in any case of its letters."""
    cases = _cases()
    parts = []
    for char in text:
        variants = cases.get(char.casefold(), frozenset()) | {char}
        if len(variants) > 1:
            # No letter's case is a GLOB special, ']' or '^': a plain class.
            parts.append("[" + "".join(sorted(variants)) + "]")
        elif char in _GLOB_SPECIAL:
            parts.append("[" + char + "]")  # '[]]' too: ']' first in a class is itself
        else:
            parts.append(char)
    return "*" + "".join(parts) + "*"


def like_pattern(text: str) -> str:
    """A LIKE pattern (escaped with ``\\``) that whatever ``glob_pattern(text)`` matches also
    matches: a character LIKE would not match in all its cases is ``_``, any one character."""
    cases = _cases()
    parts = []
    for char in text:
        variants = cases.get(char.casefold(), frozenset()) | {char}
        if len(variants) > 1 and not all(v.isascii() for v in variants):
            parts.append("_")
        elif char in "%_\\":
            parts.append("\\" + char)
        else:
            parts.append(char)
    return "%" + "".join(parts) + "%"


class ContainsAnyCase(IContains):
    """``ContainsAnyCase(F("content"), q)`` in ``.filter()``: ``strpos`` of the upper cases on
    PostgreSQL, ``LIKE`` then ``GLOB`` on SQLite, ``icontains`` on any other database."""

    def as_postgresql(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        return f"strpos(UPPER({lhs}), UPPER(%s)) > 0", [*params, self.rhs]

    def as_sqlite(self, compiler, connection):
        lhs, params = self.process_lhs(compiler, connection)
        sql = f"({lhs} LIKE %s ESCAPE '\\' AND {lhs} GLOB %s)"
        return sql, [*params, like_pattern(self.rhs), *params, glob_pattern(self.rhs)]
