"""``harness-memory trash list|restore|purge PLACE [ID]``: the safety net from the command line.

Why its own module: the CLI's commands grow in ``cli.py``; this one only needs a place and the
``memdir.trash`` operations, the same ones the page and the HTTP API call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Protocol

from .control.places import parse_scope, place_path
from .errors import ObjectNotFound
from .layout import Place
from .memdir import MemoryDir
from .memdir import trash as kept


class TrashRoot(Protocol):
    """What the trash command uses of the composition root (``MemoryServices`` is one)."""

    @property
    def key_prefix(self) -> str: ...

    def memdir(self, place: Place) -> MemoryDir: ...


EXIT_USAGE, EXIT_NOT_FOUND = 2, 3


class TrashUsage(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def add_trash_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    s = sub.add_parser("trash", help="what was deleted from a memory directory lately: list it, restore it, "
                       "or purge it for good")
    s.add_argument("action", choices=["list", "restore", "purge"])
    s.add_argument("path", help="a memory directory: users/<id>/agent-memory/<type>, "
                   "users/<id>/projects/<project>/memory (facts), agent-memory/<type>")
    s.add_argument("id", nargs="?", help="restore/purge: the trash item id (`trash list` shows it); purge "
                   "without an id empties the trash (needs --yes)")
    s.add_argument("--file", action="append", metavar="NAME", help="restore only this file of the item (repeatable)")
    s.add_argument("--yes", action="store_true", help="purge: confirm emptying the whole trash")
    s.add_argument("--json", action="store_true", help="list: machine-readable output")


def _when(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def cmd_trash(svc: TrashRoot, args: argparse.Namespace) -> int:
    scope = parse_scope(args.path, svc.key_prefix)
    if scope.place is None:
        raise TrashUsage(f"{args.path!r} is not one memory directory (e.g. users/<id>/agent-memory/default)")
    mdir = svc.memdir(scope.place)
    where = place_path(scope.place)
    days = mdir.limits.trash_days
    try:
        if args.action == "list":
            batches = kept.list_trash(mdir)
            if args.json:
                print(json.dumps([{"id": b.id, "deleted_at": b.deleted_at, "expires_at": b.expires_at(days),
                                   "origin": b.origin, "files": [f.file for f in b.files]} for b in batches],
                                 ensure_ascii=False))
                return 0
            for b in batches:
                print(f"{b.id}\t{_when(b.deleted_at)}\t{b.origin}\t{len(b.files)} file(s)\t"
                      f"{', '.join(f.file for f in b.files)}")
            if not batches:
                print(f"the trash of {where} is empty (it keeps deletions for {days:g} days)", file=sys.stderr)
            return 0
        if args.action == "restore":
            if not args.id:
                raise TrashUsage("restore needs the trash item id (see `harness-memory trash list PATH`)")
            restored = kept.restore(mdir, args.id, args.file, origin="cli")
            for name in restored:
                print(f"restored {where}/{name}", file=sys.stderr)
            return 0
        if args.id:
            kept.purge(mdir, args.id)
            print(f"purged trash item {args.id} of {where}", file=sys.stderr)
            return 0
        if not args.yes:
            raise TrashUsage("emptying the whole trash needs --yes (or give one item id)")
        print(f"purged {kept.purge(mdir)} trash item(s) of {where}", file=sys.stderr)
        return 0
    except ObjectNotFound as exc:
        raise TrashUsage(str(exc), EXIT_NOT_FOUND) from None
