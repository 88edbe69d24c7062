"""Remove credentials from the environment a command sees."""

from __future__ import annotations

import re

# Whole names or name parts that carry secrets (API keys, tokens, passwords, cloud creds).
_SECRET = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|COOKIE|SESSION_ID|AUTH)",
    re.IGNORECASE,
)
_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_APPLICATION", "GCP_", "GH_", "GITHUB_", "OPENAI_",
             "ANTHROPIC_", "MINIMAX_", "HF_", "HUGGING", "NPM_", "PYPI_", "DOCKER_", "VAULT_",
             "SSH_AUTH_SOCK", "SSH_AGENT")
_KEEP = {"XAUTHORITY", "TOKENIZERS_PARALLELISM", "KEYTIMEOUT", "GPG_TTY"}


def is_secret_name(name: str) -> bool:
    if name in _KEEP:
        return False
    upper = name.upper()
    return bool(_SECRET.search(upper)) or upper.startswith(_PREFIXES)


def scrub(env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """(clean environment, the names removed)."""
    removed = sorted(k for k in env if is_secret_name(k))
    return {k: v for k, v in env.items() if k not in removed}, removed
