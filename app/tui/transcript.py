"""Turns Session events into widgets in the ConversationView. Presentation only: what the
agent decided arrives in the events; nothing here decides anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from textual.widget import Widget

from .widgets.conversation_view import ConversationView
from .widgets.diff_view import DiffView
from .widgets.error_view import ErrorView
from .widgets.notice_view import NoticeView
from .widgets.reasoning_view import ReasoningView
from .widgets.tool_card import ToolCard
from .widgets.user_message import UserMessage

if TYPE_CHECKING:
    from m3agent.engine.api import Message

    from .widgets.answer_view import AnswerView

W = TypeVar("W", bound=Widget)


class Transcript:
    def __init__(self, conversation: ConversationView) -> None:
        self.view = conversation
        self._reasoning: ReasoningView | None = None
        self._answer: AnswerView | None = None
        self.cards: dict[str, ToolCard] = {}

    async def _mount(self, widget: W) -> W:
        await self.view.mount(widget)
        return widget

    async def user(self, text: str, attachments: tuple[str, ...] = ()) -> None:
        await self.end_segment()
        await self._mount(UserMessage(text, attachments))

    async def reasoning(self, text: str) -> None:
        if self._answer is not None:  # reasoning after an answer: a new segment
            await self.end_segment()
        if self._reasoning is None:
            self._reasoning = await self._mount(ReasoningView())
        self._reasoning.append(text)

    async def content(self, text: str) -> None:
        if self._reasoning is not None:
            self._reasoning.finish()
        if self._answer is None:
            if not text.strip():
                return  # whitespace between reasoning and answer: nothing to show yet
            # Markdown (~40 ms): imported on first use, not before the first paint
            from .widgets.answer_view import AnswerView

            self._answer = await self._mount(AnswerView())
        await self._answer.write(text)

    async def end_segment(self) -> None:
        """One engine call's output is complete (or a tool call interrupts it)."""
        if self._reasoning is not None:
            self._reasoning.finish()
            self._reasoning = None
        if self._answer is not None:
            answer, self._answer = self._answer, None
            await answer.finish()

    async def tool_started(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolCard:
        await self.end_segment()
        card = self.cards.get(call_id)
        if card is None:
            card = await self._mount(ToolCard(call_id, name, arguments))
            self.cards[call_id] = card
        return card

    async def tool_finished(
        self, call_id: str, name: str, output: str, is_error: bool, metadata: dict[str, Any]
    ) -> None:
        card = self.cards.get(call_id) or await self.tool_started(call_id, name, {})
        await card.finish(output, is_error, metadata)

    def unfinished_cards(self) -> list[ToolCard]:
        return [c for c in self.cards.values() if c.status in ("running", "approval")]

    async def error(self, message: str, kind: str = "internal") -> None:
        await self.end_segment()
        await self._mount(ErrorView(message, kind))

    async def notice(self, text: str) -> None:
        await self.end_segment()
        await self._mount(NoticeView(text))

    async def diff(self, diff: str) -> None:
        await self.end_segment()
        await self._mount(DiffView(diff))

    async def history(
        self,
        messages: Sequence[Message],
        tool_errors: dict[str, bool] | None = None,
        tool_meta: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """A resumed session's earlier messages, shown as they were (reasoning folded).
        tool_errors: call id -> is_error from the session log's tool_call_finished events."""
        errors = tool_errors or {}
        for m in messages:
            if m.role == "user":
                await self.user(m.content, tuple(p.path for p in m.media))
            elif m.role == "assistant":
                if m.reasoning:
                    await self.reasoning(m.reasoning)
                if m.content:
                    await self.content(m.content)
                for call in m.tool_calls:
                    await self.tool_started(call.id, call.name, call.arguments)
            elif m.role == "tool" and m.tool_call_id:
                is_error = errors.get(m.tool_call_id, False)
                meta = (tool_meta or {}).get(m.tool_call_id, {})
                await self.tool_finished(
                    m.tool_call_id, m.name or "tool", m.content, is_error, meta
                )
        await self.end_segment()

    async def clear(self) -> None:
        await self.end_segment()
        self.cards.clear()
        await self.view.remove_children()
