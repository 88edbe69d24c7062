"""What `m3agent run` reads before the session starts: the prompt with piped stdin beside it,
a stream-json conversation on stdin, the --output-schema file, and a quick look at a remote
server, so that a mistake is one line before any snapshot is built."""

from __future__ import annotations

import json
import os
import select
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from m3agent.agent.config import DEFAULT_SYSTEM_PROMPT

from .jsonl import parse_jsonl

if TYPE_CHECKING:
    from .settings import Settings

INPUT_FORMATS = ("text", "stream-json")


def utf8_text(raw: bytes) -> str:
    """Bytes of a prompt as UTF-8, each invalid sequence replaced by U+FFFD, with one line
    saying so: a stray Latin-1 byte must not end the run with an internal error."""
    text = raw.decode("utf-8", "replace")
    if text.count("\ufffd") > raw.decode("utf-8", "ignore").count("\ufffd"):
        sys.stderr.write("note: the prompt is not valid UTF-8; invalid bytes became U+FFFD\n")
    return text


def read_all(stdin: TextIO) -> str:
    """All of stdin, read as bytes where it has them (then decoded by utf8_text)."""
    buffer = getattr(stdin, "buffer", None)
    return utf8_text(buffer.read()) if buffer is not None else stdin.read()


def piped_stdin(stdin: TextIO) -> str | None:
    """stdin's text when it is a pipe or a file (`git diff | m3agent run "review"`), else None.

    A terminal, /dev/null or a socket is never read: reading an inherited descriptor that no
    one writes to would hang the run (CI runners hand out such descriptors)."""
    try:
        if stdin.isatty():
            return None
        mode = os.fstat(stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # closed, or not a real file (tests)
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    if stat.S_ISFIFO(mode) and not _ready(stdin.fileno(), FIRST_BYTE_WAIT_S):
        # A pipe nobody writes to (an inherited descriptor in CI): a prompt must not hang.
        sys.stderr.write(
            f"note: nothing on stdin within {FIRST_BYTE_WAIT_S:g} s: not read "
            "(use PROMPT - to wait for it)\n"
        )
        return None
    return read_all(stdin)


FIRST_BYTE_WAIT_S = 3.0  # `git diff | m3agent run ...`: the first bytes come long before


def _ready(fd: int, timeout_s: float) -> bool:
    """Data or end of file on the pipe within the time."""
    readable, _, _ = select.select([fd], [], [], timeout_s)
    return bool(readable)


def with_stdin(prompt: str, piped: str | None) -> str:
    """The prompt, then the piped text as Codex and Claude Code give it: after the task,
    marked so that the model can tell the instruction from the data."""
    if not piped or not piped.strip():
        return prompt
    return f"{prompt}\n\n<stdin>\n{piped.rstrip(chr(10))}\n</stdin>"


def stream_json_prompts(text: str) -> list[str]:
    """The user messages of a Claude Code style stream-json input, one JSON object a line:
    {"type": "user", "message": {"role": "user", "content": "..." | [{"type": "text", ...}]}}.
    ValueError names the first bad line."""

    def not_json(n: int, why: str) -> str:
        return f"--input-format stream-json: line {n} is not JSON ({why})"

    prompts = [_user_text(obj, n) for n, obj in parse_jsonl(text, not_json)]
    if not prompts:
        raise ValueError("--input-format stream-json: no user message on stdin")
    return prompts


def _user_text(obj: Any, n: int) -> str:
    message = obj.get("message") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or obj.get("type") != "user" or not isinstance(message, dict):
        raise ValueError(
            f'--input-format stream-json: line {n} is not {{"type": "user", "message": ...}}'
        )
    content = message.get("content")
    if isinstance(content, list):  # content blocks: the text ones, in order
        content = "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    if not isinstance(content, str) or not content.strip():
        raise ValueError(f"--input-format stream-json: line {n} has no text content")
    return content


def load_schema(path: Path) -> dict[str, Any]:
    """The --output-schema file: a JSON Schema the final answer must satisfy."""
    import jsonschema

    try:
        schema: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"--output-schema {path}: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"--output-schema {path}: not JSON ({e.msg}, line {e.lineno})") from e
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ValueError(f"--output-schema {path}: not a JSON Schema ({e.message})") from e
    return schema


def schema_instruction(schema: dict[str, Any]) -> str:
    """Appended to the prompt (not the system prompt: the cached prefix stays as it is)."""
    return (
        "\n\nAnswer with one JSON value and nothing else (no prose, no code fence), valid "
        f"against this JSON Schema:\n{json.dumps(schema, indent=1)}"
    )


def check_answer(schema: dict[str, Any], answer: str) -> tuple[Any, str | None]:
    """(the parsed answer, None) when it satisfies the schema, else (None, why not). A code
    fence around the JSON is tolerated: models add one however they are asked."""
    import jsonschema

    text = answer.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"the answer is not JSON ({e.msg})"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        return None, f"the answer does not match --output-schema at {where}: {e.message}"
    return value, None


def unreachable(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> str | None:
    """Why a remote server cannot be used (refused, unknown host, timeout, or it refuses the
    key: HTTP 401/403 on GET /models), else None. Other HTTP errors still mean a server is
    there: the engine reports them in its own words."""
    import httpx

    url = base_url.rstrip("/") + "/models"
    host = str(httpx.URL(base_url).copy_with(path="", query=None, fragment=None)).rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status = httpx.get(url, timeout=timeout_s, headers=headers).status_code
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        # The remote engine's own words for the same failure (engine/backends/remote.py).
        why = "connection refused" if "refused" in str(e).lower() else f"{type(e).__name__}: {e}"
        return f"cannot reach {host}: {why} (is the server running?)"
    except httpx.HTTPError:
        return None
    if status not in (401, 403):
        return None
    if api_key:
        return f"{host} refused the API key (HTTP {status}): check M3AGENT_API_KEY or api_key"
    return (
        f"{host} wants an API key (HTTP {status}): set M3AGENT_API_KEY or api_key in the "
        "config (an m3agent serve of another data home: the token in its serve/token)"
    )


def read_prompts(prompt: str | None, input_format: str) -> tuple[str, list[str]]:
    """The first prompt and the ones after it, from the argument and stdin."""
    if input_format == "stream-json":
        if prompt not in (None, "-"):
            raise ValueError("--input-format stream-json reads the prompts from stdin: no PROMPT")
        first, *rest = stream_json_prompts(read_all(sys.stdin))
        return first, rest
    if prompt is None:  # only a pipe or a file is read: never wait on a terminal
        piped = piped_stdin(sys.stdin)
        if piped is None:
            raise ValueError("Missing argument 'PROMPT': give one, or pipe it on stdin")
        return piped, []
    if prompt == "-":
        return read_all(sys.stdin), []
    # argv keeps undecodable bytes as surrogates: back to bytes, then decoded as UTF-8
    return with_stdin(utf8_text(os.fsencode(prompt)), piped_stdin(sys.stdin)), []


def append_system_prompt(settings: Settings, text: str | None) -> Settings:
    """The configured (or default) system prompt with TEXT after it (Claude Code's flag)."""
    if not text:
        return settings

    base = settings.system_prompt or DEFAULT_SYSTEM_PROMPT
    return settings.override(system_prompt=f"{base}\n\n{text}")


def forget_session(sessions_dir: Path, session_id: str) -> None:
    """--ephemeral: the log this run wrote is removed (only this session's own files)."""
    for path in sessions_dir.glob(f"{session_id}.*"):
        path.unlink(missing_ok=True)
