"""Session ids bound to their user, so no caller can reach another user's session summary.

Used by ``build_agent`` and the HTTP API, both switched by ``session.bind_to_user``.

Why: session summaries are stored by session id alone (``sessions/session-<id>.md``), and a
run injects the summary of the session it names. If a caller could name any id, user B could
pass user A's session id and read A's conversation summary in the answer. With binding on
(``session.bind_to_user``), a usable id is ``<base>-<tag>`` where ``tag`` is a hash of (user,
base): the server mints such ids, and an id that is not bound to the caller is bound on arrival
(``chat-42`` -> ``chat-42-<tag for this user>``). Naming someone else's id therefore only ever
reaches a session of one's own. No secret is needed: the tag binds, it does not authenticate —
knowing A's id does not help B, because B's requests are checked against B's tag.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid

from ..errors import InvalidName
from ..layout import validate_id

SESSION_TAG_CHARS = 12
MAX_BASE_CHARS = 128 - SESSION_TAG_CHARS - 1


def session_tag(user_id: str, base: str) -> str:
    digest = hashlib.sha256(f"harness-memory-session\x00{user_id}\x00{base}".encode()).hexdigest()
    return digest[:SESSION_TAG_CHARS]


def session_owned_by(user_id: str, session_id: str) -> bool:
    base, sep, tag = session_id.rpartition("-")
    return bool(sep and base) and len(tag) == SESSION_TAG_CHARS and hmac.compare_digest(
        tag, session_tag(user_id, base))


def bind_session_id(user_id: str, session_id: str) -> str:
    """``session_id`` bound to ``user_id`` (idempotent: an id already bound to the user is kept).
    Raises InvalidName for a malformed id."""
    validate_id(session_id, "session id")
    if session_owned_by(user_id, session_id):
        return session_id
    if len(session_id) > MAX_BASE_CHARS:
        raise InvalidName(f"session id is longer than {MAX_BASE_CHARS} characters")
    return f"{session_id}-{session_tag(user_id, session_id)}"


def bind_session(user_id: str, session_id: str | None, bind: bool = True) -> tuple[str, bool]:
    """(the session id to use, whether it is new); a new id is minted when none is given.
    ``bind`` is ``session.bind_to_user``. Raises InvalidName for a malformed id."""
    if session_id is None:
        base = "s" + uuid.uuid4().hex[:20]
        return (f"{base}-{session_tag(user_id, base)}" if bind else base), True
    if not bind:
        return validate_id(session_id, "session id"), False
    return bind_session_id(user_id, session_id), False
