"""KV pages below the engine's cache: the disk tier for finished prefixes (docs/kv-cache.md)."""
