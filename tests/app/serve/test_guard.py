"""Guard.check_head on its own: the Host rule of a wildcard public listener, token parsing."""

from __future__ import annotations

import pytest
from m3agent.app.serve.guard import Guard, ensure_token, read_token
from m3agent.app.serve.http import BadRequest

H = {"content-type": "application/json", "authorization": "Bearer t0k"}


def test_a_wildcard_public_listener_takes_any_host_but_still_checks_origin_and_token():
    loopback = Guard(token="t0k", max_body_bytes=10)
    public = Guard(token="t0k", max_body_bytes=10, hosts=None)
    lan = {**H, "host": "192.168.1.5:8000"}
    with pytest.raises(BadRequest) as e:
        loopback.check_head("POST", "/v1/chat/completions", lan)
    assert e.value.status == 403
    public.check_head("POST", "/v1/chat/completions", lan)  # control: accepted
    with pytest.raises(BadRequest) as e:
        public.check_head("POST", "/v1/chat/completions", {**lan, "origin": "http://evil.example"})
    assert e.value.status == 403
    with pytest.raises(BadRequest) as e:
        public.check_head("POST", "/v1/chat/completions", {**lan, "authorization": "Bearer x"})
    assert e.value.status == 401


def test_token_scheme_and_value(tmp_path):
    g = Guard(token="t0k", max_body_bytes=10)
    for auth in ("bearer t0k", "Bearer  t0k "):
        g.check_head("GET", "/v1/models", {"authorization": auth})
    for auth in ("Basic t0k", "t0k", "Bearer", "Bearer t0kx"):
        with pytest.raises(BadRequest):
            g.check_head("GET", "/v1/models", {"authorization": auth})
    # The token file: made once, 0600, the same on the next start.
    first = ensure_token(tmp_path)
    assert ensure_token(tmp_path) == first == read_token(tmp_path) and len(first) == 64
    assert (tmp_path / "serve" / "token").stat().st_mode & 0o777 == 0o600
