"""An in-process moto server reached through ``AWS_ENDPOINT_URL``, so the product's normal
boto3 code path runs unchanged against it."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

from hyperpod_sim import moto_patches

#: Credentials moto accepts; the simulated account never sees real ones.
SIM_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def simulated_aws() -> Iterator[str]:
    """Start moto on a free loopback port, point the AWS SDK at it, undo everything on exit."""
    moto_patches.apply()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its backends for the whole process: start from an empty account every time.
    _reset(endpoint)
    saved = {k: os.environ.get(k) for k in (*SIM_ENV, "AWS_ENDPOINT_URL", "AWS_PROFILE")}
    os.environ.update(SIM_ENV)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    os.environ.pop("AWS_PROFILE", None)
    try:
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reset(endpoint)
        server.stop()


def _reset(endpoint: str) -> None:
    request = urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")  # noqa: S310 - loopback http
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - our own loopback server
        response.read()
