"""The web_fetch tool's allow-list for a session: the config's `[web_fetch]` table, plus the
domains of Claude Code's permission rules `WebFetch(domain:NAME)` (`web_fetch(domain:NAME)`)
wherever rules are written: the config's [tools] table, --allowedTools / --disallowedTools,
the user's saved rules and a trusted project's .m3agent/settings.json. An allow rule adds its
domain, a deny rule refuses it (also as a redirect's target). No allowed domain: no web_fetch
tool in the session (deny by default). Read when the session starts (the tool list opens the
prompt); the approval gate reads the same rules for every call."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from m3agent.agent.config import ToolRule, Verdict
from m3agent.agent.path_rules import RuleError, parse_rule
from m3agent.tools.web_fetch import DOMAIN_PREFIX, FetchPolicy, WebFetch

from .prefix_rules import saved_rules
from .settings import Settings


def rule_domains(rules: Iterable[ToolRule]) -> tuple[list[str], list[str]]:
    """(allowed, denied) domains of the web_fetch rules among `rules`."""
    allowed: list[str] = []
    denied: list[str] = []
    for rule in rules:
        try:
            parsed = parse_rule(rule.tool)
        except RuleError:
            continue  # the gate reports a bad rule where it reads it
        pattern = parsed.pattern or ""
        if WebFetch.name in parsed.tools and pattern.startswith(DOMAIN_PREFIX):
            domain = pattern[len(DOMAIN_PREFIX) :]
            if rule.action == Verdict.ALLOW:
                allowed.append(domain)
            elif rule.action == Verdict.DENY:
                denied.append(domain)
    return allowed, denied


def fetch_policy(settings: Settings, cwd: Path) -> FetchPolicy | None:
    """The session's web_fetch policy; None when no domain is allowed. ValueError names a
    configured rule (the config's [tools], a flag) whose domain is not a domain name."""
    allowed, denied = rule_domains(settings.rules)
    for name in (*allowed, *denied):  # a flag's or the config's [tools]: said, exit 2
        if not FetchPolicy.name_ok(name):
            raise ValueError(
                f"rule WebFetch({DOMAIN_PREFIX}{name}): {name!r} is not a domain name or address"
            )
    # saved rules (a hand-edited file, an untrusted-then-trusted project): a bad one is left
    # out rather than keeping every session from starting; /permissions lists it
    saved_allowed, saved_denied = rule_domains(saved_rules(settings.home, cwd)[0])
    allowed += [d for d in saved_allowed if FetchPolicy.name_ok(d)]
    denied += [d for d in saved_denied if FetchPolicy.name_ok(d)]
    policy = (settings.web_fetch or FetchPolicy()).with_domains(allowed, denied)
    return policy if policy.allowed_domains else None
