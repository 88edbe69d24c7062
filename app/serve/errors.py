"""The error a request is refused with (HTTP 400), shared by the wire and media modules."""


class WireError(ValueError):
    """A request the server rejects with HTTP 400; the message names the cause."""
