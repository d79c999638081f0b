"""Fuzz, beside the trace fuzz: `watch --page`'s queries at random (any bytes, percent-encoded, as the batch or
beside it, on /predict and /measure) against a session driven by hand-built results. Every answer is a 200 or a
400 with a JSON reason, never a 500, and the server answers /state after each. Seeded (derandomized), bounded."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_watch_page_server import ask, served  # noqa: F401 - the fixture: a session and its page server

QUERIES = st.one_of(
    st.binary(max_size=40).map(lambda b: "batch=" + quote(b, safe="")),
    st.text(max_size=30).map(lambda t: quote(t, safe="=&")),
    st.integers(-2**70, 2**70).map(lambda n: f"batch={n}"),
    st.lists(st.sampled_from(["batch=1", "batch=", "x=2", "batch=99999999999", "&", "batch=%00"]), max_size=4)
    .map("&".join),
    st.integers(1, 4000).map(lambda n: "batch=" + "9" * n),
)


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method_path=st.sampled_from([("GET", "/predict"), ("POST", "/measure")]), query=QUERIES)
def test_any_query_is_a_200_or_a_400(served, method_path: tuple[str, str], query: str) -> None:  # noqa: F811
    session, page = served
    method, path = method_path
    status, body = ask(page, method, f"{path}?{query}")
    assert status in (200, 400), (status, body)
    assert status == 200 or isinstance(body["error"], str)
    assert ask(page, "GET", "/state")[0] == 200
    session.snapshot()  # the view watch draws on every change still builds
