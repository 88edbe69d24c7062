"""Stop strings over streamed text: the match is cut off, and text that could still turn into
a stop string is held back until it cannot."""

from __future__ import annotations


class StopStringFilter:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._text = ""
        self._released = 0
        self.matched: str | None = None

    def feed(self, delta: str) -> str:
        """Returns the text now safe to release; sets `matched` when a stop string appears."""
        if self.matched is not None:
            return ""
        search_from = max(0, len(self._text) - self._hold)
        self._text += delta
        best = -1
        for stop in self.stops:
            idx = self._text.find(stop, search_from)
            if idx >= 0 and (best < 0 or idx < best):
                best, self.matched = idx, stop
        end = best if best >= 0 else len(self._text) - self._hold
        if end <= self._released:
            return ""
        out = self._text[self._released : end]
        self._released = end
        return out

    def flush(self) -> str:
        if self.matched is not None:
            return ""
        out = self._text[self._released :]
        self._released = len(self._text)
        return out
