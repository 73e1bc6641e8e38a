"""The key proxy's rules (KEY-1…6 in gateway/runtime/key_rules.py), by table: where a stand-in is found, the
upstream URL and headers, what never passes."""

from __future__ import annotations

import pytest

from gateway.runtime.key_rules import STAND_IN_PREFIX, Refused, response_headers, stand_in_of, upstream_request

S = STAND_IN_PREFIX + "abc"
REAL = "sk-real"


@pytest.mark.parametrize(("headers", "target", "found"), [
    ([("Authorization", f"Bearer {S}")], "/v1/chat", S),               # KEY-1: OpenAI's bearer
    ([("authorization", f"bearer  {S} ")], "/v1/chat", S),             # any case, spaces around
    ([("X-Api-Key", S)], "/v1/messages", S),                           # Anthropic's
    ([("x-goog-api-key", S)], "/v1beta/models", S),                    # Gemini's
    ([("api-key", S)], "/openai/deployments", S),                      # Azure's
    ([], f"/v1beta/models:generate?key={S}", S),                       # Gemini's query form
    ([("x-api-key", "sk-other"), ("authorization", f"Bearer {S}")], "/", S),  # the first stand-in wins
])
def test_a_stand_in_is_found_where_apis_carry_keys(headers: list[tuple[str, str]], target: str, found: str) -> None:
    assert stand_in_of(headers, target) == found


@pytest.mark.parametrize(("headers", "target"), [
    ([], "/v1/messages"),
    ([("x-api-key", "sk-real-looking")], "/v1/messages"),             # not a stand-in: never forwarded as is
    ([("cookie", S)], "/v1/messages"),                                  # not a credential header
    ([], f"/v1?other={S}"),
])
def test_a_request_without_a_stand_in_is_refused(headers: list[tuple[str, str]], target: str) -> None:
    with pytest.raises(Refused) as refused:
        stand_in_of(headers, target)
    assert refused.value.status == 401 and refused.value.rule == "KEY-1"


@pytest.mark.parametrize(("upstream", "target", "url"), [
    ("https://api.anthropic.com", "/v1/messages?beta=true", "https://api.anthropic.com/v1/messages?beta=true"),
    ("https://api.openai.com", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
    ("https://gw.example/base/", "/v1/x", "https://gw.example/base/v1/x"),              # the upstream's own path
    ("https://g.example", f"/m:gen?key={S}&alt=sse", "https://g.example/m:gen?alt=sse"),  # KEY-3: `key` dropped
])
def test_the_upstream_url_keeps_the_path_and_never_the_host_of_the_request(upstream: str, target: str,
                                                                          url: str) -> None:
    assert upstream_request(upstream, "x-api-key", REAL, target, []).url == url


@pytest.mark.parametrize("target", ["http://evil.example/v1", "//evil.example/v1", "evil.example/v1",
                                    "@evil.example/v1", "*"])
def test_a_target_that_is_not_a_path_is_refused(target: str) -> None:
    with pytest.raises(Refused) as refused:
        upstream_request("https://api.anthropic.com", "x-api-key", REAL, target, [])
    assert refused.value.status == 400 and refused.value.rule == "KEY-2"


@pytest.mark.parametrize(("header", "sent"), [("x-api-key", REAL), ("authorization", f"Bearer {REAL}"),
                                              ("x-goog-api-key", REAL)])
def test_the_real_key_goes_in_the_grants_header_alone(header: str, sent: str) -> None:
    incoming = [("Authorization", f"Bearer {S}"), ("x-api-key", S), ("x-goog-api-key", S), ("api-key", S),
                ("Host", "127.0.0.1:4000"), ("Content-Length", "12"), ("Connection", "keep-alive"),
                ("X-Forwarded-For", "10.0.2.100"), ("Cookie", "a=b"), ("Proxy-Authorization", "x"),
                ("content-type", "application/json"), ("anthropic-version", "2023-06-01"),
                ("accept", "text/event-stream")]
    headers = upstream_request("https://api.anthropic.com", header, REAL, "/v1/messages", incoming).headers
    assert headers == (("content-type", "application/json"), ("anthropic-version", "2023-06-01"),
                       ("accept", "text/event-stream"), (header, sent))
    assert S not in str(headers)


def test_the_answer_passes_unchanged_but_for_framing() -> None:
    answer = [("Content-Type", "text/event-stream"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked"),
              ("Content-Length", "10"), ("Connection", "close"), ("Set-Cookie", "s=1"), ("request-id", "req_1")]
    assert response_headers(answer) == [("Content-Type", "text/event-stream"), ("Content-Encoding", "gzip"),
                                        ("request-id", "req_1")]
