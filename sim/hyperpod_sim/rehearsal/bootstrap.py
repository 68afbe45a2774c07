"""The rehearsal's runtime client: one invocation of one handler, in a clean interpreter, as Lambda runs it.

Run as ``python3.12 -I -S bootstrap.py <task root> <result file> <layer dir>...``, with the function's
environment and the event on stdin. Standard library only: the interpreter sees nothing but its own
standard library, the function's code (``LAMBDA_TASK_ROOT``) and the layers' ``python`` folders, in
Lambda's order. The handler's result, or its error in Lambda's shape (``errorMessage``, ``errorType``,
``stackTrace``), is written to the result file with the process's peak memory; stdout and stderr are the
function's log.
"""

import importlib
import json
import os
import resource
import sys
import time
import traceback


class Context:
    """The fields of Lambda's context object the handlers and Powertools read."""

    def __init__(self, deadline):
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
        self.invoked_function_arn = os.environ["REHEARSAL_FUNCTION_ARN"]
        self.aws_request_id = os.environ["REHEARSAL_REQUEST_ID"]
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self._deadline = deadline

    def get_remaining_time_in_millis(self):
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def peak_rss_kib():
    """This process's peak resident memory. Not ``getrusage``: Linux carries ``ru_maxrss`` across ``execve``,
    so it would report the parent's peak (the test process) instead of the handler's."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main():
    task_root, result_file, layers = sys.argv[1], sys.argv[2], sys.argv[3:]
    deadline = time.monotonic() + float(os.environ["REHEARSAL_TIMEOUT_S"])
    sys.path[:0] = [task_root, *(os.path.join(layer, "python") for layer in layers)]
    os.chdir(task_root)
    event = json.loads(sys.stdin.read())
    module_name, _, function_name = os.environ["_HANDLER"].rpartition(".")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        result = {"ok": handler(event, Context(deadline))}
    except Exception as error:  # noqa: BLE001 - every error is the function's answer, in Lambda's shape
        result = {
            "error": {
                "errorMessage": str(error),
                "errorType": type(error).__name__,
                "requestId": os.environ["REHEARSAL_REQUEST_ID"],
                "stackTrace": traceback.format_tb(error.__traceback__),
            }
        }
    sys.stdout.flush()
    sys.stderr.flush()
    result["max_rss_kib"] = peak_rss_kib()
    try:
        text = json.dumps(result)
    except (TypeError, ValueError) as error:  # Lambda cannot return what JSON cannot carry
        failure = {"errorMessage": f"Unable to marshal response: {error}", "errorType": "Runtime.MarshalError"}
        text = json.dumps({"error": failure, "max_rss_kib": result["max_rss_kib"]})
    with open(result_file, "w", encoding="utf-8") as out:
        out.write(text)


if __name__ == "__main__":
    main()
