"""Exit codes of every m3agent command (documented in docs/cli.md)."""

OK = 0
INTERNAL_ERROR = 1
USAGE_ERROR = 2  # also click/typer's own code for bad options
ENGINE_UNAVAILABLE = 3
TURN_LIMIT = 4  # max turns, max tool calls or wall-time limit reached
SANDBOX_UNAVAILABLE = 5  # the shell would run with no protection and the user did not allow it
MCP_LOGIN = 6  # an HTTP MCP server needs `m3agent mcp login NAME`, or that login failed
INTERRUPTED = 130  # Ctrl-C / SIGINT, as shells report it
