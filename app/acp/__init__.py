"""`m3agent acp`: the Agent Client Protocol over stdio (docs/acp.md). server.py answers the
editor, translate.py turns session events into ACP updates, editor_tools.py routes file
reads/writes through the editor and holds plan mode."""
