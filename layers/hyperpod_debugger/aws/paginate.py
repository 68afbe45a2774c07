"""Complete pagination with opaque tokens.

Tokens are passed back exactly as received: no format guard, so a token containing ``-``,
``_``, ``.`` or ``:`` is never dropped (a format guard would end the listing early). A service that hands back the
same token twice would loop forever; that is reported as a malformed response instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hyperpod_debugger.aws.errors import ApiCallError, call
from hyperpod_debugger.domain.observations import ApiFailure

#: Safety net only; real listings end long before it (20,000 nodes = 200 pages).
MAX_PAGES = 10_000


def pages(
    client: Any,
    action: str,
    method: str,
    result_key: str,
    *,
    token_in: str = "NextToken",
    token_out: str = "NextToken",
    required: bool = True,
    max_pages: int = MAX_PAGES,
    **params: Any,
) -> Iterator[list[dict[str, Any]]]:
    """Yield the ``result_key`` list of every page."""
    token: str | None = None
    seen: set[str] = set()
    for _ in range(max_pages):
        request = dict(params)
        if token:
            request[token_in] = token
        response = call(client, action, method, **request)
        items = response.get(result_key)
        if items is None:
            if required:
                raise ApiCallError(ApiFailure(action, "malformed", f"response has no {result_key!r} list"))
            items = []
        if not isinstance(items, list):
            raise ApiCallError(ApiFailure(action, "malformed", f"{result_key!r} is not a list"))
        yield items
        token = response.get(token_out) or None
        if not token:
            return
        if not isinstance(token, str) or token in seen:
            raise ApiCallError(ApiFailure(action, "malformed", "the service repeated a pagination token"))
        seen.add(token)
    raise ApiCallError(ApiFailure(action, "malformed", f"more than {max_pages} pages; stopped"))


def collect_all(client: Any, action: str, method: str, result_key: str, **kwargs: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in pages(client, action, method, result_key, **kwargs):
        out.extend(page)
    return out
