"""One screen per file, each with a sibling .tcss."""
