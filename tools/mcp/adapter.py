"""MCP tools as m3agent tools: `mcp__SERVER__TOOL`, the server's own JSON schema and
description, and a result rendered to bounded text for the model.

Each MCP tool is one `McpTool` instance, its name, description and schema its own (the Toolset
and the approval step read them from the instance). Arguments are not re-validated here: the
model's arguments were typed by this same schema when parsed, and the server validates them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from ..base import Preview, PreviewKind, Tool, ToolContext, ToolOutcome, ToolResult
from ..bounds import cut_result, preview_text
from ..json_types import JSONObject, JSONValue
from ..private_fs import private_dir, write_private
from .hub import McpCancelled, McpHub
from .state import McpCallError

if TYPE_CHECKING:  # the SDK is imported when a server starts
    from mcp_types import CallToolResult
    from mcp_types import Tool as ListedTool

MAX_OUTPUT_CHARS = 100_000  # like every tool result: bounded, with a note where it was cut
# A server's description goes into the prompt: bounded, since it is the server's text, not ours.
MAX_DESCRIPTION_CHARS = 2048
PREFIX = "mcp__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """mcp__SERVER__TOOL, with characters a tool name cannot carry in the prompt's markup
    replaced by "_" (the server still gets its own name)."""
    return f"{PREFIX}{server}__{_UNSAFE.sub('_', tool)}"[:128]


class _AnyArgs(BaseModel):
    """Whatever object the server's schema allows; the server checks it."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool[BaseModel]):
    """One tool a server listed (an mcp_types.Tool), named mcp__SERVER__TOOL, with the
    server's description (bounded) and input schema."""

    kind = "fetch"
    mutates = True  # an MCP tool may do anything: checkpoint before it
    risky = True  # and ask first unless a rule or --approval never says not to
    Args = _AnyArgs

    def __init__(
        self, hub: McpHub | None, server: str, listed: ListedTool, timeout_s: float | None = None
    ) -> None:
        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        schema.pop("title", None)  # the SDK's generated "fooArguments" title is prompt noise
        description = (listed.description or listed.title or listed.name).strip()
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
        self.name = tool_name(server, listed.name)
        self.description = description
        self.server = server
        self.remote_name: str = listed.name
        self.input_schema: JSONObject = schema
        self.annotations: JSONObject = (
            listed.annotations.model_dump(exclude_none=True) if listed.annotations else {}
        )
        self.hub = hub  # None: previews only (a preview never calls the server)
        self.timeout_s = timeout_s  # the server's own; None: the session's tool timeout

    def parameters(self) -> JSONObject:
        return self.input_schema

    def preview(self, args: BaseModel, ctx: ToolContext) -> Preview:
        """The request the server would get (touches: opaque, the Tool default)."""
        body = json.dumps(args.model_dump(), ensure_ascii=False, indent=1)
        text, note = preview_text(
            f"MCP server {self.server}, tool {self.remote_name}\narguments: {body}\n", "request"
        )
        return Preview(PreviewKind.TEXT, text, note)

    def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        if self.hub is None:
            return ToolResult(f"{self.name}: no connection to {self.server}", is_error=True)
        arguments = args.model_dump()
        timeout = self.timeout_s or ctx.timeout_s
        try:
            result = self.hub.call_tool(
                self.server, self.remote_name, arguments, timeout_s=timeout, cancel=ctx.cancel
            )
        except McpCancelled:
            return ToolResult(
                "interrupted by the user",
                is_error=True,
                metadata={ToolOutcome.INTERRUPTED: True, "mcp_server": self.server},
            )
        except McpCallError as e:
            return ToolResult(
                str(e), is_error=True, metadata={"mcp_server": self.server, "mcp_failure": True}
            )
        return render_result(result, self.server, self.hub.media_dir)


class ReadResourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    server: str = Field(description="The MCP server that returned the resource link.")
    uri: str = Field(description="The resource URI, as given in the tool result.")


class ReadMcpResource(Tool[ReadResourceArgs]):
    """Reads a resource an MCP tool result linked to (resources/read on its server)."""

    name = "mcp_read_resource"
    description = (
        "Read a resource that an MCP tool result linked to (shown as [resource: ...]). "
        "Give the server name and the URI exactly as in that result."
    )
    mutates = False
    risky = True  # reaches a server, which may do anything

    def __init__(self, hub: McpHub) -> None:
        self.hub = hub

    def preview(self, args: BaseModel, ctx: ToolContext) -> Preview:
        assert isinstance(args, ReadResourceArgs)
        text, note = preview_text(
            f"MCP server {args.server}, read resource {args.uri}\n", "request"
        )
        return Preview(PreviewKind.TEXT, text, note)

    def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        assert isinstance(args, ReadResourceArgs)
        conn = self.hub.server(args.server)
        timeout = (conn.cfg.tool_timeout_s if conn else None) or ctx.timeout_s
        try:
            result = self.hub.read_resource(
                args.server, args.uri, timeout_s=timeout, cancel=ctx.cancel
            )
        except McpCancelled:
            return ToolResult(
                "interrupted by the user", is_error=True, metadata={ToolOutcome.INTERRUPTED: True}
            )
        except McpCallError as e:
            return ToolResult(str(e), is_error=True, metadata={"mcp_server": args.server})
        from mcp_types import BlobResourceContents, TextResourceContents

        rows: list[str] = []
        images: list[str] = []
        for item in result.contents:
            if isinstance(item, TextResourceContents):
                rows.append(item.text)
            elif isinstance(item, BlobResourceContents):
                rows.append(
                    _binary(item.blob, item.mime_type, self.hub.media_dir, images, str(item.uri))
                )
        return _bounded(
            "\n".join(rows) or "(empty resource)",
            False,
            {"mcp_server": args.server, "images": images},
        )


# ---- results --------------------------------------------------------------------------------


def render_result(result: CallToolResult, server: str, media_dir: Path | None) -> ToolResult:
    """CallToolResult -> text: text blocks, structured content, images, resources."""
    from mcp_types import TextResourceContents

    rows: list[str] = []
    images: list[str] = []
    links: list[str] = []
    texts: list[str] = []
    shown: dict[int, str] = {}  # row index -> saved image the model sees after that row
    for block in result.content or []:
        if block.type == "text":
            rows.append(block.text)
            texts.append(block.text)
        elif block.type in ("image", "audio"):
            saved_before = len(images)
            rows.append(_binary(block.data, block.mime_type, media_dir, images, block.type))
            if block.type == "image" and len(images) > saved_before:
                shown[len(rows) - 1] = images[-1]
        elif block.type == "resource_link":
            links.append(str(block.uri))
            mime = f", {block.mime_type}" if block.mime_type else ""
            rows.append(
                f"[resource: {block.name} {block.uri}{mime}; read it with "
                f'mcp_read_resource(server="{server}", uri="{block.uri}")]'
            )
        elif block.type == "resource":  # an embedded resource: its text inline, a blob as a file
            res = block.resource
            if isinstance(res, TextResourceContents):
                rows.append(f"[resource {res.uri}]\n{res.text}")
            else:
                rows.append(_binary(res.blob, res.mime_type, media_dir, images, str(res.uri)))
        else:  # a block type newer than this SDK's list
            kind = getattr(block, "type", "")
            rows.append(f"[{kind or 'unknown'} content not shown]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(_same_json(t, structured) for t in texts):
        rows.append("structured content:\n" + json.dumps(structured, ensure_ascii=False, indent=1))
    meta: dict[str, Any] = {"mcp_server": server}
    if structured is not None:
        meta["structured_content"] = structured
    if images:
        meta["images"] = images
    if links:
        meta["resource_links"] = links
    text = "\n".join(rows) if rows else "(no content)"
    media, pos = [], 0
    for i, row in enumerate(rows):
        pos += len(row)
        if i in shown:
            media.append(("image", shown[i], pos))  # right after the row that names it
        pos += 1  # the newline
    return _bounded(text, bool(result.is_error), meta, tuple(media))


def _same_json(text: str, value: JSONValue) -> bool:
    """Whether a text block already says what the structured content says (servers send
    both for older clients; a non-object result arrives wrapped as {"result": ...})."""
    candidates = [value]
    if isinstance(value, dict) and list(value) == ["result"]:
        candidates.append(value["result"])
        if isinstance(value["result"], str) and text == value["result"]:
            return True
    try:
        parsed = json.loads(text)
    except (ValueError, TypeError):
        return False
    return any(parsed == c for c in candidates)


def _binary(
    data: str, mime: str | None, media_dir: Path | None, saved: list[str], label: str
) -> str:
    """Save the data, say where (an image is then shown to the model right after this text,
    when the agent can read it as an image)."""
    try:
        raw = base64.b64decode(data, validate=False)
    except (ValueError, TypeError):
        return f"[{label}: {mime or 'binary'} data that is not valid base64]"
    where = ""
    if media_dir is not None:
        ext = mimetypes.guess_extension(mime or "") or ".bin"
        path = media_dir / (hashlib.sha256(raw).hexdigest()[:16] + ext)
        try:
            private_dir(media_dir)  # what a server returned: the user's data, 0700 / 0600
            write_private(path, raw)
            saved.append(str(path))
            where = f", saved to {path}"
        except OSError:
            where = ""
    shown = "" if label == "image" and where else "; not shown to the model"
    return (
        f"[{mime or 'binary'} {label if label in ('image', 'audio') else 'data'}, "
        f"{len(raw)} bytes{where}{shown}]"
    )


def _bounded(
    text: str, is_error: bool, meta: dict[str, Any], media: tuple[tuple[str, str, int], ...] = ()
) -> ToolResult:
    """The result, cut to MAX_OUTPUT_CHARS where it is longer (an image keeps its place)."""
    result = ToolResult(text, is_error=is_error, metadata=meta, media=media)
    return cut_result(result, MAX_OUTPUT_CHARS)
