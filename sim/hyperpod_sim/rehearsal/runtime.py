"""The rehearsal's Lambda service: the deployed functions' handlers run as Lambda runs them.

Each invocation is a fresh process of the interpreter the function's ``Runtime`` names (``python3.12``),
isolated (``-I -S``: no site-packages, no ``PYTHON*`` variables), whose import path is the function's code
asset and its layers, nothing else; its environment is the template's ``Environment`` plus the variables
Lambda sets (function name, memory, region, log group, the execution role's credentials, obtained with
``sts:AssumeRole`` on the function's role so that every call it makes is signed as that role). The
template's ``Timeout`` ends a process that runs longer (``Sandbox.Timedout``); a process whose peak memory
passes ``MemorySize`` fails as ``Runtime.OutOfMemory``. Errors come back in Lambda's shape with
``FunctionError: Unhandled``.

Two things differ from AWS, both stated where they apply:

* **Architecture.** The layer asset is built for arm64; this machine is not. The layer's recipe built for
  the host (the same lock, the same versions: :func:`host_layer` checks that every distribution and every
  pure-Python file of the two builds are the same) stands in for it.
* **Endpoints.** The process reaches the simulated account through ``AWS_ENDPOINT_URL`` (moto) and
  ``AWS_ENDPOINT_URL_SSM`` (the fake Session Manager), which real Lambda does not set.

Synchronous invokes come through moto's Lambda API (the Step Functions interpreter calls it over HTTP);
asynchronous ones (EventBridge targets) run on a thread with the function's ``EventInvokeConfig``: retries,
then the on-failure destination, in Lambda's destination record shape.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3

from hyperpod_sim.rehearsal.deploy import ACCOUNT, Deployment

BOOTSTRAP = pathlib.Path(__file__).with_name("bootstrap.py")


class RuntimeMissing(RuntimeError):
    """The interpreter a function's runtime names is not on this machine."""


def interpreter(runtime: str) -> str:
    """The path of the interpreter for a Lambda runtime name such as ``python3.12``."""
    if not runtime.startswith("python"):
        raise RuntimeMissing(f"the rehearsal runs Python runtimes only, not {runtime}")
    version = runtime.removeprefix("python")
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}"))
    if candidates:
        return candidates[-1]
    found = shutil.which(f"python{version}")
    if found and "/shims/" not in found:  # a pyenv shim answers for versions that are not selected
        return found
    raise RuntimeMissing(
        f"no python{version} on this machine (PATH or {pyenv}/versions): the rehearsal runs each handler under "
        f"the runtime the template names"
    )


def _distributions(layer: pathlib.Path) -> set[str]:
    return {p.name.removesuffix(".dist-info") for p in (layer / "python").glob("*.dist-info")}


def _pure_files(layer: pathlib.Path) -> dict[str, str]:
    """The layer's Python source files and their digests."""
    root = layer / "python"
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*.py")
        if "__pycache__" not in p.parts
    }


def host_layer(deployed: pathlib.Path, host: pathlib.Path) -> pathlib.Path:
    """``host`` in place of the deployed layer asset, once it is shown to be the same recipe: the same
    distributions at the same versions and byte-identical Python files (only native modules may differ)."""
    if not (host / "python").is_dir():
        raise FileNotFoundError(f"{host}/python is missing: run `make layer-host` first")
    if _distributions(deployed) != _distributions(host):
        only = sorted(_distributions(deployed) ^ _distributions(host))
        raise ValueError(f"the host layer {host} is not the deployed layer's recipe; differing: {only}")
    ours, theirs = _pure_files(deployed), _pure_files(host)
    differing = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differing:
        raise ValueError(f"the host layer's Python files differ from the deployed layer's: {differing[:5]}")
    return host


@dataclass
class Invocation:
    function: str
    event: Any
    invocation_type: str
    request_id: str
    payload: Any = None
    error: dict[str, Any] | None = None
    log: str = ""
    duration_s: float = 0.0
    max_rss_mib: float = 0.0
    attempt: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Fault:
    """A way to make one function fail for the next ``times`` invocations: an environment that breaks it,
    or a shorter timeout (the process is ended as the template's timeout would end it)."""

    environment: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    times: int = 1


class LambdaService:
    def __init__(
        self,
        deployment: Deployment,
        *,
        host_layer_dir: pathlib.Path,
        endpoints: Mapping[str, str],
        async_retry_delay_s: float = 0.0,
    ) -> None:
        self.deployment = deployment
        self.endpoints = dict(endpoints)
        self.async_retry_delay_s = async_retry_delay_s
        self.invocations: list[Invocation] = []
        self.faults: dict[str, Fault] = {}
        self.host_layer_dir = host_layer_dir
        self._host_layers: dict[pathlib.Path, pathlib.Path] = {}
        self._lock = threading.Lock()
        self._credentials: dict[str, dict[str, str]] = {}
        self._tmp = pathlib.Path(tempfile.mkdtemp(prefix="rehearsal-lambda-"))

    # ------------------------------------------------------------------ invoking

    def invoke(self, function: str, event: Any, *, invocation_type: str = "RequestResponse") -> Invocation:
        """Invoke ``function`` (name or ARN). ``Event``: retried and routed as Lambda does; the first
        attempt's record is returned after all attempts have run."""
        if invocation_type == "Event":
            return self._invoke_async(function, event)
        return self._run(function, event, invocation_type)

    def _invoke_async(self, function: str, event: Any) -> Invocation:
        """Lambda's asynchronous invoke, run to its end before returning (the rehearsal wants its outcome):
        the first attempt, then ``MaximumRetryAttempts`` more (default 2), then the on-failure destination."""
        name = function.split(":function:", 1)[-1].split(":", 1)[0]
        config = self._invoke_config(name)
        retries = int(config.get("MaximumRetryAttempts", 2))
        first = record = self._run(name, event, "Event")
        for attempt in range(2, retries + 2):
            if record.ok:
                return first
            time.sleep(self.async_retry_delay_s * attempt)
            record = self._run(name, event, "Event", attempt=attempt)
        if not record.ok:
            self._on_failure(name, config, event, record, retries + 1)
        return first

    def _invoke_config(self, name: str) -> dict[str, Any]:
        for props in self.deployment.of_type("AWS::Lambda::EventInvokeConfig").values():
            if props["FunctionName"] == name:
                return props
        return {}

    def _on_failure(self, name: str, config: dict[str, Any], event: Any, last: Invocation, count: int) -> None:
        destination = config.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        if not destination:
            return
        record = {
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(),
            "requestContext": {
                "requestId": last.request_id,
                "functionArn": f"{self._arn(name)}:$LATEST",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": count,
            },
            "requestPayload": event,
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": last.error,
        }
        self.send_to_queue(destination, record, function=name)

    def client_as(self, function: str | None, service: str) -> Any:
        """A client signed as ``function``'s execution role, as Lambda itself calls for that function (event
        source polling, destinations); ``None``: the harness's own credentials (EventBridge's side)."""
        credentials: dict[str, str] = {}
        if function is not None:
            role = str(self.deployment.function_properties(function)["Role"])
            creds = self._role_credentials(role)
            credentials = {
                "aws_access_key_id": creds["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": creds["AWS_SECRET_ACCESS_KEY"],
                "aws_session_token": creds["AWS_SESSION_TOKEN"],
            }
        return boto3.client(
            service, region_name=self.deployment.region, endpoint_url=self.endpoints["AWS_ENDPOINT_URL"], **credentials
        )

    def send_to_queue(self, arn: str, record: dict[str, Any], *, function: str | None = None) -> None:
        """Send ``record`` to the queue ``arn``: a function's destination (as that function's role) or an
        EventBridge target (``function`` None)."""
        if ":sqs:" not in arn:
            raise NotImplementedError(f"destination {arn}: the rehearsal delivers to SQS queues only")
        sqs = self.client_as(function, "sqs")
        url = sqs.get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(record))

    def _arn(self, name: str) -> str:
        return f"arn:aws:lambda:{self.deployment.region}:{ACCOUNT}:function:{name}"

    def _run(self, function: str, event: Any, invocation_type: str, *, attempt: int = 1) -> Invocation:
        name = function.split(":function:", 1)[-1].split(":", 1)[0]
        props = self.deployment.function_properties(name)
        request_id = str(uuid.uuid4())
        record = Invocation(name, event, invocation_type, request_id, attempt=attempt)
        with self._lock:
            fault = self.faults.get(name)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    del self.faults[name]
        timeout = float(props.get("Timeout", 3))
        if fault is not None and fault.timeout_s is not None:
            timeout = fault.timeout_s
        memory = int(props.get("MemorySize", 128))
        workdir = pathlib.Path(tempfile.mkdtemp(dir=self._tmp))
        environment = self._environment(name, props, request_id, timeout, workdir)
        if fault is not None:
            environment.update(fault.environment)
        result_file = workdir / "result.json"
        command = [
            interpreter(str(props["Runtime"])),
            "-I",
            "-S",
            str(BOOTSTRAP),
            str(self._code_dir(props["Code"])),
            str(result_file),
            *(str(layer) for layer in self._layers(props.get("Layers", []))),
        ]
        started = time.monotonic()
        process = subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
        try:
            output, _ = process.communicate(json.dumps(event).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            record.error = {
                "errorType": "Sandbox.Timedout",
                "errorMessage": f"{datetime.now(UTC).isoformat()} {request_id} Task timed out after "
                f"{timeout:.2f} seconds",
            }
        record.duration_s = time.monotonic() - started
        record.log = output.decode("utf-8", "replace")
        if record.error is None:
            if not result_file.exists():
                record.error = {"errorType": "Runtime.ExitError", "errorMessage": f"exit status {process.returncode}"}
            else:
                result = json.loads(result_file.read_text())
                record.max_rss_mib = result.get("max_rss_kib", 0) / 1024
                if record.max_rss_mib > memory:
                    record.error = {
                        "errorType": "Runtime.OutOfMemory",
                        "errorMessage": f"peak memory {record.max_rss_mib:.0f} MiB over MemorySize {memory} MiB",
                    }
                elif "error" in result:
                    record.error = result["error"]
                else:
                    record.payload = result["ok"]
        shutil.rmtree(workdir, ignore_errors=True)
        with self._lock:
            self.invocations.append(record)
        return record

    # ------------------------------------------------------------------ what Lambda provides

    def _environment(
        self, name: str, props: dict[str, Any], request_id: str, timeout: float, workdir: pathlib.Path
    ) -> dict[str, str]:
        log_group = props.get("LoggingConfig", {}).get("LogGroup") or f"/aws/lambda/{name}"
        environment = {str(k): str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
        environment.update(
            {
                "AWS_REGION": self.deployment.region,
                "AWS_DEFAULT_REGION": self.deployment.region,
                "AWS_LAMBDA_FUNCTION_NAME": name,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(props.get("MemorySize", 128)),
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_LAMBDA_LOG_GROUP_NAME": log_group,
                "AWS_LAMBDA_LOG_STREAM_NAME": f"{datetime.now(UTC):%Y/%m/%d}/[$LATEST]{request_id.replace('-', '')}",
                "AWS_EXECUTION_ENV": f"AWS_Lambda_{props['Runtime']}",
                "AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001",
                "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
                "_X_AMZN_TRACE_ID": f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};"
                f"Parent={uuid.uuid4().hex[:16]};Sampled=0",
                "LAMBDA_TASK_ROOT": str(self._code_dir(props["Code"])),
                "_HANDLER": str(props["Handler"]),
                "TZ": ":UTC",
                "LANG": "en_US.UTF-8",
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(workdir),
                "TMPDIR": str(workdir),
                "REHEARSAL_FUNCTION_ARN": self._arn(name),
                "REHEARSAL_REQUEST_ID": request_id,
                "REHEARSAL_TIMEOUT_S": f"{timeout:g}",
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true",
                **self._role_credentials(str(props["Role"])),
                **self.endpoints,
            }
        )
        return environment

    def _role_credentials(self, role_arn: str) -> dict[str, str]:
        with self._lock:
            if role_arn not in self._credentials:
                sts = boto3.client(
                    "sts", region_name=self.deployment.region, endpoint_url=self.endpoints["AWS_ENDPOINT_URL"]
                )
                creds = sts.assume_role(RoleArn=role_arn, RoleSessionName="rehearsal")["Credentials"]
                self._credentials[role_arn] = {
                    "AWS_ACCESS_KEY_ID": creds["AccessKeyId"],
                    "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                    "AWS_SESSION_TOKEN": creds["SessionToken"],
                }
            return self._credentials[role_arn]

    def role_of_access_key(self, access_key: str) -> str | None:
        for role, creds in self._credentials.items():
            if creds["AWS_ACCESS_KEY_ID"] == access_key:
                return role
        return None

    def _asset(self, key: str) -> pathlib.Path:
        for asset in self.deployment.template.assets.values():
            if asset.key == key:
                return asset.path
        raise KeyError(f"no asset of the cloud assembly is published as {key}")

    def _code_dir(self, code: dict[str, Any]) -> pathlib.Path:
        return self._asset(code["S3Key"])

    def _layers(self, arns: list[str]) -> list[pathlib.Path]:
        out = []
        for arn in arns:
            (logical,) = [k for k, v in self.deployment.refs.items() if v == arn]
            deployed = self._asset(self.deployment.properties[logical]["Content"]["S3Key"]).resolve()
            with self._lock:
                if deployed not in self._host_layers:
                    self._host_layers[deployed] = host_layer(deployed, self.host_layer_dir)
            out.append(self._host_layers[deployed])
        return out

    # ------------------------------------------------------------------ moto's Lambda API

    @contextlib.contextmanager
    def serving(self) -> Iterator[LambdaService]:
        """moto's ``Invoke`` (what the Step Functions interpreter and any SDK client call) runs here."""
        from moto.awslambda.models import LambdaBackend

        original = LambdaBackend.invoke
        service = self

        # LambdaBackend's method from here on, so its first parameter is that backend's ``self``
        def invoke(
            self: LambdaBackend, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
        ) -> bytes:
            self.get_function(function_name, qualifier)  # ResourceNotFound as on AWS
            event = json.loads(body) if body else {}
            kind = (headers or {}).get("X-Amz-Invocation-Type") or "RequestResponse"
            record = service.invoke(function_name, event, invocation_type=kind)
            if kind == "Event":
                return b""
            if record.error is not None:
                response_headers["x-amz-function-error"] = "Unhandled"
                return json.dumps(record.error).encode()
            return json.dumps(record.payload).encode()

        LambdaBackend.invoke = invoke  # type: ignore[method-assign]
        try:
            yield self
        finally:
            LambdaBackend.invoke = original  # type: ignore[method-assign]
            shutil.rmtree(self._tmp, ignore_errors=True)
