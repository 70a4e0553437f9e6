"""What daphne's websocket library (autobahn) does for every frame that this server does
not need, made cheap. Applied once, when config/asgi.py is imported (daphne imports the
application before it serves).

- **Unmasking.** Every frame a client sends is masked (RFC 6455 5.3), and autobahn makes
  a masker object for each one. Its native one (NVX, a cffi extension) costs an import
  statement, two cffi allocations and a finalizer per frame, and its pure-Python one
  XORs byte by byte. ``Masker`` XORs the whole payload as one integer, in C.
- **Log lines never written.** autobahn formats the arguments of its debug lines
  (``hltype``, ``hlval``) for every frame sent and every read, whether or not debug is
  on, and colours each with ``click.style`` when click is installed (uvicorn brings it).
  Without the colours, and with ``hltype`` naming its callable without ``inspect``,
  the formatting is a few string operations.

Both lean on autobahn's internals: the version range is pinned in pyproject.toml and
tests/test_framework_internals.py fails by name when an upgrade changes them.
"""
import autobahn.twisted.websocket
import autobahn.util
import autobahn.websocket.protocol


class Masker:
    """A frame's XOR masker, as autobahn's ``create_xor_masker(mask, length)`` answers one:
    ``process`` unmasks the next part of the payload (a frame may come in several reads),
    ``pointer`` is how much of it has been processed."""

    __slots__ = ("_mask", "_ptr")

    def __init__(self, mask: bytes, length: int | None = None):
        self._mask = bytes(mask)
        self._ptr = 0

    def pointer(self) -> int:
        return self._ptr

    def reset(self) -> None:
        self._ptr = 0

    def process(self, data: bytes) -> bytes:
        size = len(data)
        if not size:
            return b""
        shift = self._ptr & 3
        mask = self._mask[shift:] + self._mask[:shift]
        key = (mask * ((size >> 2) + 1))[:size]
        self._ptr += size
        return (int.from_bytes(data, "little") ^ int.from_bytes(key, "little")).to_bytes(size, "little")


def type_name(obj) -> str:
    """What autobahn's ``hltype`` puts in a debug line: ``<module.qualname>`` of a callable."""
    return f"<{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}>"


# The modules whose per-frame debug lines call ``hltype`` (each imported it by name).
HLTYPE_CALLERS = (autobahn.websocket.protocol, autobahn.twisted.websocket)


def apply() -> None:
    autobahn.websocket.protocol.create_xor_masker = Masker
    autobahn.util._HAS_CLICK = False
    for module in HLTYPE_CALLERS:
        module.hltype = type_name
