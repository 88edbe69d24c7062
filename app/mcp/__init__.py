"""The app's side of MCP servers (the client itself is tools/mcp; docs/mcp.md).

settings.py (which servers a session starts, from which files, trust, persisted approvals),
store.py (the writes of `m3agent mcp add|remove`), oauth.py (`m3agent mcp login|logout`),
check.py (doctor's and `/mcp`'s view), reload.py (`/mcp reload`), prompts.py (MCP prompts as
slash commands).
"""
