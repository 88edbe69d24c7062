"""apply_patch: a Codex-style patch envelope or a unified diff; all hunks apply or none."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import bounded_diff, preview_diff
from .fdio import FsRefused, lstat, parent_dir, read_bytes, read_in, unlink_in, write_in
from .patch_parse import FileOp, Hunk, PatchError, parse
from .paths import PathDenied, check_write, display, hardlinks_allowed

# Per file: (source, destination, old text or None, new text or None).
_Plan = list[tuple[Path, Path | None, str | None, str | None]]


class ApplyPatchArgs(BaseModel):
    patch: str = Field(
        description="'*** Begin Patch' ... '*** End Patch' (with *** Add File / *** Update File / "
        "*** Delete File sections and @@ hunks) or a unified diff."
    )


def _find(lines: list[str], block: list[str], start: int, hint: int | None) -> int:
    """Index where `block` occurs at or after `start` (nearest to hint); -1 if nowhere."""
    if not block:
        return len(lines) if hint is None else min(max(hint, start), len(lines))
    # exactly, then trailing whitespace aside, then surrounding whitespace aside
    norms: tuple[Callable[[str], str], ...] = (
        lambda s: s,
        lambda s: s.rstrip(),
        lambda s: s.strip(),
    )
    for norm in norms:
        want = [norm(x) for x in block]
        hits = [
            i
            for i in range(start, len(lines) - len(block) + 1)
            if [norm(x) for x in lines[i : i + len(block)]] == want
        ]
        if hits:
            return min(hits, key=lambda i: abs(i - hint)) if hint is not None else hits[0]
    return -1


def _apply_hunks(path: str, text: str, hunks: list[Hunk]) -> str:
    trailing_nl = text.endswith("\n") or not text
    lines = text.split("\n")
    if trailing_nl and lines and lines[-1] == "":
        lines.pop()
    pos = 0
    for n, h in enumerate(hunks, start=1):
        if h.anchor is not None:
            a = _find(lines, [h.anchor], pos, None)
            if a < 0:
                raise PatchError(f"{path}: hunk {n}: anchor line {h.anchor!r} not found")
            pos = a + 1 if h.old[:1] != [h.anchor] else a
        if h.at_eof:
            at = len(lines) - len(h.old)
            if lines[at:] != h.old and [x.rstrip() for x in lines[at:]] != [
                x.rstrip() for x in h.old
            ]:
                at = -1
        else:
            at = _find(lines, h.old, pos, h.hint)
        if at < 0:
            shown = "\n".join(h.old[:6])
            raise PatchError(
                f"{path}: hunk {n} does not apply; these lines were not found:\n{shown}"
            )
        # Context lines keep the file's own text (the match may have ignored whitespace).
        replacement, k = [], at
        for tag, text in h.ops:
            if tag == " ":
                replacement.append(lines[k])
                k += 1
            elif tag == "-":
                k += 1
            else:
                replacement.append(text)
        lines[at : at + len(h.old)] = replacement
        pos = at + len(replacement)
    return "\n".join(lines) + ("\n" if lines and trailing_nl else "")


class ApplyPatch(Tool[ApplyPatchArgs]):
    name = "apply_patch"
    claude_names = ("Edit",)
    capability = Capability.WRITE
    kind = "edit"
    description = (
        "Apply a patch to one or more files, atomically: every hunk applies or nothing changes. "
        "Accepts the '*** Begin Patch' envelope or a unified diff."
    )
    mutates = True

    def touches(self, args: ApplyPatchArgs) -> Touches:
        try:
            ops = parse(args.patch)
        except PatchError:
            return Touches()  # malformed: names nothing; the call itself reports it
        reads = tuple(op.path for op in ops if op.kind != "add")
        writes = tuple(p for op in ops for p in (op.path, op.move_to) if p)
        return Touches(reads=reads, writes=writes)

    def preview(self, args: ApplyPatchArgs, ctx: ToolContext) -> Preview:
        try:
            plan = self._plan(parse(args.patch), ctx)
        except (PatchError, PathDenied) as e:
            return Preview(
                PreviewKind.TEXT, f"patch would not apply, nothing would change: {e}", is_error=True
            )
        text, note = preview_diff(_diffs(plan, ctx)[0])
        return Preview(PreviewKind.DIFF, text, note)

    def run(self, args: ApplyPatchArgs, ctx: ToolContext) -> ToolResult:
        try:
            ops = parse(args.patch)
            plan = self._plan(ops, ctx)
        except (PatchError, PathDenied) as e:
            return ToolResult(f"patch not applied, nothing changed: {e}", is_error=True)
        try:
            self._commit(plan)
        except PartlyApplied as e:
            return ToolResult(f"patch failed part-way and was not fully undone: {e}", is_error=True)
        except (OSError, FsRefused) as e:
            return ToolResult(f"patch not applied, nothing changed: {e}", is_error=True)
        lines, summary = _diffs(plan, ctx)
        diff, note, full = bounded_diff(lines)
        changed = sorted({str(p) for src, dst, _, _ in plan for p in (src, dst) if p})
        return ToolResult(
            "\n".join(summary) + "\n" + diff + (note + "\n" if note else ""),
            metadata={"diff": full, "paths_changed": changed, "truncated": bool(note)},
        )

    def _plan(self, ops: list[FileOp], ctx: ToolContext) -> _Plan:
        """(source, destination, old text or None, new text or None) per file, all checked."""
        plan: _Plan = []
        seen: dict[Path, str | None] = {}

        def current(p: Path, raw: str) -> str:
            if p in seen:
                text = seen[p]
                if text is None:
                    raise PatchError(f"{raw}: deleted earlier in this patch")
                return text
            try:  # by descriptor, no symlink followed, no hard-linked file read
                data = read_bytes(p, raw, links_ok=hardlinks_allowed(p, ctx))
            except FsRefused as e:
                msg = str(e)
                raise PatchError(f"{raw}: no such file" if "no such" in msg else msg) from None
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise PatchError(f"{raw}: not valid UTF-8 text") from None

        for op in ops:
            src = check_write(op.path, ctx)
            if op.kind == "add":
                if lstat(src) is not None and src not in seen:
                    raise PatchError(f"{op.path}: already exists (use *** Update File)")
                new = "\n".join(op.content) + ("\n" if op.content else "")
                plan.append((src, None, None, new))
                seen[src] = new
            elif op.kind == "delete":
                old = current(src, op.path)
                plan.append((src, None, old, None))
                seen[src] = None
            else:
                old = current(src, op.path)
                new = _apply_hunks(op.path, old, op.hunks)
                dst = check_write(op.move_to, ctx) if op.move_to else None
                if dst is not None and dst != src and (lstat(dst) is not None or dst in seen):
                    raise PatchError(f"{op.move_to}: move target already exists")
                plan.append((src, dst, old, new))
                if dst is not None and dst != src:
                    seen[src] = None
                    seen[dst] = new
                else:
                    seen[src] = new
        return plan

    def _commit(self, plan: _Plan) -> None:
        """Make every change; if one fails, undo those already made (PartlyApplied when an undo
        fails too). A change and its undo go through one descriptor of the checked directory
        (tools/fdio.py), so the undo lands where the change did, even in a directory that a
        concurrent command renamed or swapped meanwhile."""
        undo: list[_Undo] = []
        try:
            for src, dst, _, new in plan:
                target = dst or src
                _change(undo, target, None if new is None else new.encode("utf-8"))
                if dst is not None and dst != src:
                    _change(undo, src, None)
        except (OSError, FsRefused):
            unrestored = [shown for shown in map(_revert, reversed(undo)) if shown]
            if unrestored:
                raise PartlyApplied(unrestored) from None
            raise
        finally:
            for dfd, _, _, _ in undo:
                os.close(dfd)


class PartlyApplied(Exception):
    """A change failed and so did the undo of an earlier one."""

    def __init__(self, unrestored: list[str]) -> None:
        super().__init__(f"could not restore {', '.join(unrestored)}")


# (checked directory, name, shown path, (bytes, mode) before or None when it was absent)
_Undo = tuple[int, str, str, tuple[bytes, int] | None]


def _change(undo: list[_Undo], path: Path, data: bytes | None) -> None:
    """Write `data` to `path`, or remove it (None), recording in `undo` how to go back."""
    shown = str(path)
    dfd = parent_dir(path, shown, create=data is not None)
    try:
        before = read_in(dfd, path.name, shown)
    except (OSError, FsRefused):
        os.close(dfd)
        raise
    undo.append((dfd, path.name, shown, before))
    if data is None:
        unlink_in(dfd, path.name, shown)
    else:
        write_in(dfd, path.name, data, shown)


def _revert(entry: _Undo) -> str | None:
    """Undo one change; the path shown when that failed."""
    dfd, name, shown, before = entry
    try:
        if before is None:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass  # the change itself was what failed
        else:
            write_in(dfd, name, before[0], shown, mode=before[1])
    except (OSError, FsRefused):
        return shown
    return None


def _diffs(plan: _Plan, ctx: ToolContext) -> tuple[list[str], list[str]]:
    """(the unified diff lines of a plan, one summary line per file)."""
    diffs: list[str] = []
    summary: list[str] = []
    for src, dst, old, new in plan:
        target = dst or src
        name = display(target, ctx)
        diffs.extend(
            difflib.unified_diff(
                (old or "").splitlines(True),
                (new or "").splitlines(True),
                f"a/{display(src, ctx)}" if old is not None else "/dev/null",
                f"b/{name}" if new is not None else "/dev/null",
            )
        )
        verb = "added" if old is None else "deleted" if new is None else "updated"
        if dst and dst != src and new is not None:
            verb = f"moved from {display(src, ctx)} and updated"
        summary.append(f"{verb} {name}")
    return diffs, summary
