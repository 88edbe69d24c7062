"""web_fetch: a web page as text for the model (Claude Code's WebFetch), behind the domain
allow-list of the config (policy.py), every redirect checked again."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from ..base import Blocker, Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .client import FetchRefused, Page, check_url, fetch
from .html_text import html_to_text
from .policy import FetchPolicy

HTML = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "text/")
DOMAIN_PREFIX = "domain:"  # what a call declares it touches: a permission rule's pattern


class WebFetchArgs(BaseModel):
    url: str = Field(description="The http or https URL of the page.")
    offset: int = Field(
        0,
        ge=0,
        description="Characters of the page's text to skip: where a long page was cut, to read on.",
    )


def _readable(page: Page) -> bool:
    ctype = page.content_type
    if not ctype:  # no stated type: text unless it holds a NUL byte
        return b"\x00" not in page.body[:4096]
    return ctype in HTML or ctype.startswith(TEXT_TYPES) or ctype.endswith(("+json", "+xml"))


def _decode(page: Page) -> str:
    charset = page.charset
    if charset is None and page.content_type in HTML:  # <meta charset=...> near the top
        m = re.search(rb"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]+)", page.body[:2048], re.I)
        charset = m.group(1).decode("ascii").lower() if m else None
    try:
        return page.body.decode(charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return page.body.decode("utf-8", "replace")


class WebFetch(Tool[WebFetchArgs]):
    name = "web_fetch"
    claude_names = ("WebFetch",)
    kind = "fetch"
    capability = Capability.NETWORK  # read only: plan mode lets it run, as Claude Code's
    mutates = False

    def __init__(self, policy: FetchPolicy | None = None) -> None:
        self.policy = policy if policy is not None else FetchPolicy()
        allowed = ", ".join(self.policy.allowed_domains) or "none"
        self.description = (
            "Fetch a web page over http or https and return its text (HTML converted to "
            "Markdown-like text, with links). Only these domains can be fetched: "
            f"{allowed}. A long page is cut; call again with offset to read on."
        )

    def touches(self, args: WebFetchArgs) -> Touches:
        # The host as `domain:NAME`: Claude Code's WebFetch(domain:NAME) rules match it the way
        # a path rule matches a path (agent/path_rules.py). Never a file.
        try:
            host = (urlsplit(args.url.strip()).hostname or "").rstrip(".")
        except ValueError:
            host = ""
        return Touches(reads=(DOMAIN_PREFIX + host,)) if host else Touches()

    def preview(self, args: WebFetchArgs, ctx: ToolContext) -> Preview:
        try:
            _, host, _ = check_url(args.url, self.policy)
        except FetchRefused as e:
            return Preview(PreviewKind.TEXT, str(e), is_error=True)
        return Preview(PreviewKind.TEXT, f"GET {args.url.strip()} (host {host})")

    def run(self, args: WebFetchArgs, ctx: ToolContext) -> ToolResult:
        try:
            page = fetch(args.url, self.policy, cancel=ctx.cancel)
        except FetchRefused as e:
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": Blocker.WEB_FETCH})
        meta: dict[str, object] = {
            "url": page.url,
            "status": page.status,
            "content_type": page.content_type,
            "bytes": len(page.body),
        }
        if page.redirects:
            meta["redirects"] = list(page.redirects)
        if not _readable(page):
            return ToolResult(
                f"{page.url} is {page.content_type or 'of no stated type'} "
                f"(HTTP {page.status}), not text: not shown",
                is_error=True,
                metadata=meta,
            )
        text = _decode(page)
        title = ""
        if page.content_type in HTML:
            title, text = html_to_text(text, page.url)
        return ToolResult(
            _shown(page, title, text, args.offset, self.policy.max_chars),
            is_error=page.status >= 400,
            metadata={**meta, "chars": len(text)},
        )


def _shown(page: Page, title: str, text: str, offset: int, max_chars: int) -> str:
    head = [f"URL: {page.url}", f"HTTP {page.status}, {page.content_type}"]
    if page.redirects:
        head.append(f"redirected from {page.redirects[0]}")
    if title:
        head.append(f"Title: {title}")
    part = text[offset : offset + max_chars]
    notes = []
    if page.truncated:
        notes.append(f"[the response was longer than {len(page.body)} bytes: the rest not read]")
    if offset + max_chars < len(text):
        notes.append(
            f"[page text cut at character {offset + len(part)} of {len(text)}: call again "
            f"with offset={offset + len(part)} to read on]"
        )
    elif offset:
        notes.append(f"[from character {offset} of {len(text)}]")
    if offset >= len(text) and text:
        part = f"(nothing after character {offset}: the text has {len(text)})"
    return "\n".join([*head, "", part, *(["", *notes] if notes else [])])
