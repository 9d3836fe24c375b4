"""schemathesis hooks for tools/fuzz-api.sh: the one 5xx factledger documents as an answer.

`not_a_server_error` fails on every 5xx. factledger has one 5xx that is part of its
contract rather than a failure: a read given `?min_position=N` that its projection has
not reached within the bounded wait answers `503` problem+json `PROJECTION_BEHIND`
naming `min_position` ("retry"; README, "Read your own write"). The fuzzer sends any
integer as `min_position`, most of them past the head of the log, and that answer is
the documented one.

`no_server_error` below is `not_a_server_error` with exactly that exception: a 503
whose problem `code` is `PROJECTION_BEHIND`, whose `field` is `min_position`, on a
request that sent `min_position`. Any other 5xx fails, the request timeout's `503
REQUEST_TIMEOUT` and every 500 included. tools/fuzz-api.sh runs it in place of
`not_a_server_error`.
"""

import schemathesis


def _problem(response):
    try:
        body = response.json()
    except Exception:  # not JSON at all: not the documented answer
        return {}
    return body if isinstance(body, dict) else {}


def _is_projection_behind(response, case):
    if response.status_code != 503:
        return False
    problem = _problem(response)
    sent = case.query or {}
    return (
        problem.get("code") == "PROJECTION_BEHIND"
        and problem.get("field") == "min_position"
        and "min_position" in sent
    )


@schemathesis.check
def no_server_error(ctx, response, case):
    """No 5xx, except the documented 503 PROJECTION_BEHIND for an unreached min_position."""
    if response.status_code < 500 or _is_projection_behind(response, case):
        return None
    raise AssertionError(
        f"server error {response.status_code} on {case.method} {case.path}: "
        f"{response.text[:500]}"
    )
