"""web_fetch: a page over http(s), as text, behind the config's domain allow-list."""

from .policy import FetchPolicy
from .tool import DOMAIN_PREFIX, WebFetch

__all__ = ["DOMAIN_PREFIX", "FetchPolicy", "WebFetch"]
