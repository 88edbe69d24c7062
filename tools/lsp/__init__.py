"""Diagnostics from a language server: one long-lived server per configured command, spoken
to over stdio JSON-RPC (framing.py: the wire; client.py: one server; pool.py: a session's
servers and the files opened in them). tools/diagnostics.py decides which files go to which
server and launches it under the checker's policy."""
