"""HTML to readable text, Markdown-flavoured, with the standard library's html.parser: the
title, headings as `#`, list items as `-`, links as `[text](absolute URL)`, code blocks kept
as they are; scripts, styles and other invisible parts dropped."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
BLOCK = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "ul",
        "ol", "dl", "dt", "dd", "table", "tr", "blockquote", "figure", "figcaption", "form",
        "hr", "details", "summary", "body", "html",
    }
)  # fmt: skip
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "wbr"})


class _Text(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base_url
        self.out: list[str] = []
        self.title: list[str] = []
        self.skip = 0  # depth inside elements whose text is not shown
        self.pre = 0
        self.in_title = False
        self.links: list[tuple[str | None, int]] = []  # (href, where its text starts)

    def _newlines(self, n: int) -> None:
        """Ends the text so far with at least n line breaks (none at the very start)."""
        if not self.out:
            return
        tail = "".join(self.out[-4:])
        have = len(tail) - len(tail.rstrip("\n"))
        if have < n:
            self.out.append("\n" * (n - have))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag in SKIP:
            if tag not in VOID:
                self.skip += 1
            return
        if self.skip:
            return
        if tag in HEADINGS:
            self._newlines(2)
            self.out.append("#" * HEADINGS[tag] + " ")
        elif tag == "li":
            self._newlines(1)
            self.out.append("- ")
        elif tag == "br":
            self.out.append("\n")
        elif tag == "pre":
            self._newlines(2)
            self.out.append("```\n")
            self.pre += 1
        elif tag == "code" and not self.pre:
            self.out.append("`")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag == "a":
            href = dict(attrs).get("href")
            self.links.append((href, len(self.out)))
        elif tag in BLOCK:
            self._newlines(2 if tag in ("p", "table", "blockquote") else 1)
            if tag == "hr":
                self.out.append("---\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag in HEADINGS or tag == "p":
            self._newlines(2)
        elif tag == "pre" and self.pre:
            self.pre -= 1
            self.out.append("\n```")
            self._newlines(2)
        elif tag == "code" and not self.pre:
            self.out.append("`")
        elif tag == "a" and self.links:
            href, start = self.links.pop()
            text = "".join(self.out[start:]).strip()
            if href and text and not href.startswith(("javascript:", "#")):
                del self.out[start:]
                self.out.append(f"[{text}]({urljoin(self.base, href)})")
        elif tag in BLOCK or tag == "li":
            self._newlines(1)

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        if self.skip:
            return
        if self.pre:
            self.out.append(data)
        else:
            self.out.append(re.sub(r"\s+", " ", data))


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(the page's title, its text)."""
    parser = _Text(base_url)
    parser.feed(html)
    parser.close()
    text = "".join(parser.out)
    # tidy: no spaces at line ends or starts (outside code blocks), at most one blank line
    lines, in_code = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_code = not in_code
        lines.append(line.rstrip() if in_code else line.strip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return " ".join("".join(parser.title).split()), text
