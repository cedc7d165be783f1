"""The worker's channels carry only what the worker wrote: each line is a JSON message behind
an HMAC of it, keyed by a secret the reading side chose.

Target code runs in the processes that write these channels (the worker loads it, the forked
child calls it), so it can reach their file descriptors: a target that writes on every open
fd (JSON that looks like an answer, or bytes) must not become an answer, crash the reader or
kill the worker. A line whose HMAC does not match is `Forged`, and the reader turns it into an
error verdict naming the target.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any


class Forged(Exception):
    """A line on the channel that its writer did not sign (target code wrote it)."""


def new_key() -> bytes:
    return os.urandom(32)


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()


def frame(key: bytes, msg: dict[str, Any]) -> bytes:
    """One signed line: b"<hex hmac> <json>\\n"."""
    body = json.dumps(msg).encode()
    return _mac(key, body) + b" " + body + b"\n"


def unframe(key: bytes, line: bytes | str) -> dict[str, Any]:
    """The message of a signed line (with or without its newline), or Forged."""
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogateescape")
    mac, _, body = line.rstrip(b"\n").partition(b" ")
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise Forged(f"a line the worker did not write: {line[:80]!r}")
    return json.loads(body)
