"""One glob-to-regex translator for the gitignore subset (tools/ignore.py, glob, grep) and the
per-path tool rules (agent/path_rules.py).

`**/` any directories (none too), `**` anything, `*` and `?` within one name. The two dialects
differ in two places, each a switch here rather than a second translator:

- a trailing `/**`: gitignore's `build/**` matches what is inside `build` but not `build`
  itself; a rule such as `Edit(src/**)` covers `src` too (dir_itself=True).
- `[...]`: a character class in gitignore (`[!...]` negated); literal brackets in a rule
  (classes=False), so a route file such as `app/[id].tsx` is named as written.
"""

from __future__ import annotations

import re


def glob_to_regex(pattern: str, *, dir_itself: bool = False, classes: bool = True) -> str:
    """The body of a regex for `pattern` (no anchors, no flags: callers add them)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?" if dir_itself else "/.*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and classes and (j := pattern.find("]", i + 1)) != -1:
            body = pattern[i + 1 : j].replace("\\", "\\\\")
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)
