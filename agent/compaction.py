"""Compaction: keep the system prompt and the snapshot, summarise the conversation tail.

The summary comes from the model itself: one extra engine call whose prompt is the current
conversation plus a request to summarise (so it is itself a prefix-cache hit). When that call
fails, a mechanical summary (the user's prompts, the tools called, the last answer) takes its
place: compaction must work even when the engine cannot. The summary becomes one user message
after the kept prefix (user text: M3's template renders no `system` message after the first,
agent/prompt_messages.py); the prompt's cached system block and snapshot stay valid. A fresh
snapshot is the same operation with the snapshot message replaced (it is folded into the one
leading system message of every request, so the model sees it under the real template). Both
are reported as a ContextEvent, and the next request's cache miss is attributed to them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from m3agent.engine import api

from .context import SNAPSHOT_OPEN
from .conversation import Conversation
from .events import ContextAction, ContextEvent
from .prompt_cache import COMPACTION, SNAPSHOT_REFRESHED, CacheTracker
from .prompt_messages import request_messages

COMPACT_PROMPT = (
    "The conversation is about to be compacted. Write a summary of it for yourself: the user's "
    "goals, what has been done (files changed and why), what was learned, and what remains. "
    "Be complete but brief. Do not call tools; answer with the summary only."
)
SUMMARY_HEADER = "Summary of the conversation so far (earlier messages were compacted):\n\n"
SUMMARY_MAX_TOKENS = 2048
# After a refresh the notice is user text at the end of the summary: a `system` message there
# would never reach the model (M3's template renders only the first one).
REFRESH_NOTE = (
    "\n\n(The repository snapshot at the top of this conversation was taken again just now:"
    " it shows the files as they are at this point.)"
)


def is_snapshot(m: api.Message) -> bool:
    return m.role == "system" and m.content.startswith(SNAPSHOT_OPEN)


def kept_prefix(messages: Sequence[api.Message]) -> int:
    """How many leading messages compaction keeps: the system prompt(s) and the snapshot."""
    n = 0
    while n < len(messages) and messages[n].role == "system":
        n += 1
    return n


def mechanical_summary(messages: Sequence[api.Message]) -> str:
    lines: list[str] = []
    answer = ""
    for m in messages:
        if m.role == "user" and not m.content.startswith(SUMMARY_HEADER):
            lines.append(f"- The user asked: {m.content.strip()[:500]}")
        elif m.role == "user":
            lines.append(m.content[len(SUMMARY_HEADER) :].strip()[:4000])
        elif m.role == "assistant":
            for c in m.tool_calls:
                args = json.dumps(c.arguments, ensure_ascii=False)[:200]
                lines.append(f"- You called {c.name} {args}")
            if m.content.strip():
                answer = m.content.strip()
    if answer:
        lines.append(f"- Your last answer: {answer[:1000]}")
    return "\n".join(lines) or "(nothing happened yet)"


async def model_summary(
    engine: api.Engine,
    messages: Sequence[api.Message],
    tools: Sequence[dict[str, Any]],
    sampling: api.SamplingParams,
    session_thinking_mode: api.ThinkingMode = api.ThinkingMode.ADAPTIVE,
) -> tuple[str, api.Usage | None]:
    """The model's own summary, or ("", None) when it gave none."""
    request = api.ChatRequest(
        request_id=f"compact-{secrets.token_hex(6)}",
        messages=request_messages((*messages, api.Message(role="user", content=COMPACT_PROMPT))),
        tools=tuple(tools),  # the same tools: the developer block stays a cache hit
        thinking_mode=api.ThinkingMode.DISABLED,  # this call's generation prefix only
        sampling=replace(sampling, max_tokens=min(sampling.max_tokens, SUMMARY_MAX_TOKENS)),
        # the session's: the system block, and so the whole prompt, stays a cache hit
        session_thinking_mode=session_thinking_mode,
    )
    text: list[str] = []
    usage: api.Usage | None = None
    async for d in engine.stream(request):
        if isinstance(d, api.ContentDelta):
            text.append(d.text)
        elif isinstance(d, api.UsageDelta):
            usage = d.usage
    return "".join(text).strip(), usage


async def compact(
    conversation: Conversation,
    engine: api.Engine,
    *,
    tools: Sequence[dict[str, Any]] = (),
    sampling: api.SamplingParams | None = None,
    cache: CacheTracker | None = None,
    trigger: str = "manual",
    new_snapshot: api.Message | None = None,
    session_thinking_mode: api.ThinkingMode = api.ThinkingMode.ADAPTIVE,
) -> ContextEvent:
    """Rewrites the conversation tail (logged) and returns the event to report."""
    messages = conversation.messages
    keep = kept_prefix(messages)
    tail = messages[keep:]
    detail: dict[str, Any] = {"trigger": trigger, "messages_before": len(messages)}
    if not tail and new_snapshot is None:
        detail.update(messages_after=len(messages), summary_source="none", tokens_before=None)
        return ContextEvent(
            action=ContextAction.COMPACT, detail={**detail, "note": "nothing to compact"}
        )
    summary_usage: api.Usage | None = None
    source = "none"
    new_tail: list[api.Message] = []
    if tail:
        summary = ""
        try:
            summary, summary_usage = await model_summary(
                engine, messages, tools, sampling or api.SamplingParams(), session_thinking_mode
            )
            source = "model"
        except api.EngineError as e:
            detail["summary_error"] = str(e)
        if not summary:
            summary, source = mechanical_summary(tail), "mechanical"
        note = REFRESH_NOTE if new_snapshot is not None else ""
        new_tail.append(api.Message(role="user", content=SUMMARY_HEADER + summary + note))
    if new_snapshot is not None:
        # The old snapshot goes, everything before it (the system prompt) stays.
        keep = next((i for i, m in enumerate(messages[:keep]) if is_snapshot(m)), keep)
        kept_after = [m for m in messages[keep : kept_prefix(messages)] if not is_snapshot(m)]
        new_tail = [new_snapshot, *kept_after, *new_tail]
    conversation.replace_tail(keep, new_tail)
    if cache is not None:
        cache.note(SNAPSHOT_REFRESHED if new_snapshot is not None else COMPACTION)
    detail.update(
        messages_after=len(conversation.messages),
        summary_source=source,
        tokens_before=(summary_usage.prompt_tokens if summary_usage else None),
    )
    return ContextEvent(
        action=ContextAction.REFRESH if new_snapshot is not None else ContextAction.COMPACT,
        detail=detail,
    )
