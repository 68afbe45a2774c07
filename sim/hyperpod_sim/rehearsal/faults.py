"""Service-side faults for the rehearsal: an AWS API that answers as it does when it is overloaded.

    with throttled("sagemaker", "ListClusters", times=2):
        stage.sweep()     # the first two ListClusters calls, from anyone, answer ThrottlingException

The fault sits in moto's request dispatch, so every caller meets it the same way: the Step Functions
interpreter's SDK integration, a handler in its own process, the CLI. The answer is the JSON protocol's
error shape (HTTP 400, ``__type`` ThrottlingException, "Rate exceeded"), which botocore's retry modes
recognise as a throttle.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.exceptions import JsonRESTError
from moto.core.responses import BaseResponse


@dataclass
class Throttle:
    service: str
    action: str
    times: int
    answered: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> bool:
        with self._lock:
            if self.answered >= self.times:
                return False
            self.answered += 1
            return True


_ACTIVE: list[Throttle] = []


class _ThrottlingException(JsonRESTError):
    code = 400

    def __init__(self) -> None:
        super().__init__("ThrottlingException", "Rate exceeded")

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        # every AWS answer, errors included, carries a request id (SDKs and Step Functions read it)
        return [*super().get_headers(*args, **kwargs), ("x-amzn-RequestId", str(uuid.uuid4()))]


_ORIGINAL = BaseResponse.call_action


def _call_action(self: BaseResponse) -> TYPE_RESPONSE:
    action_name = self._get_action()
    for active in list(_ACTIVE):
        if self.service_name == active.service and action_name == active.action and active.take():
            raise _ThrottlingException()
    return _ORIGINAL(self)


@contextlib.contextmanager
def throttled(service: str, action: str, *, times: int) -> Iterator[Throttle]:
    """The next ``times`` calls of ``service``'s ``action`` (its API name, e.g. ``ListClusters``) are throttled."""
    throttle = Throttle(service, action, times)
    _ACTIVE.append(throttle)
    BaseResponse.call_action = _call_action  # type: ignore[method-assign]
    try:
        yield throttle
    finally:
        _ACTIVE.remove(throttle)
        if not _ACTIVE:
            BaseResponse.call_action = _ORIGINAL  # type: ignore[method-assign]
