"""The Textual front end: a consumer of the Session's event stream, with no agent logic."""
