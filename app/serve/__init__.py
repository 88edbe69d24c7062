"""`m3agent serve`: one warm Engine behind an OpenAI-compatible HTTP endpoint.

wire.py (JSON <-> ChatRequest / chunks), http.py (a small asyncio HTTP/1.1 server),
server.py (routes over any Engine), lock.py (the lock file `run` and `--status` read).
"""
