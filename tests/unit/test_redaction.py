"""Credentials in text from the cluster never survive: a credential corpus, redacted before storage.

The credentials are made here, in the shapes their issuers define (not by our patterns): IAM access key ids
(``AKIA``/``ASIA`` and 16 characters), 40-character secret keys, STS session tokens, SigV4 pre-signed URLs
(``X-Amz-Credential``, ``X-Amz-Signature``, ``X-Amz-Security-Token`` query parameters), real PEM and OpenSSH
private keys (written by ``cryptography``), real JWTs (written by PyJWT), Slack webhook URLs and tokens,
GitHub tokens, passwords in URLs. Each is planted where it really turns up: a lifecycle script's xtrace, a
credentials file, the JSON of an STS or IMDS answer, a curl line, a HyperPod failure message, a kernel
line. Then the text goes through a :class:`Finding` (what every store and channel receives), through
``analyze`` (node text as an agent submits it), and through the log filter (botocore's DEBUG bodies).
"""

from __future__ import annotations

import io
import json
import logging
import random
import string

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from hyperpod_debugger.agent import tools
from hyperpod_debugger.domain.model import Finding, Priority, Tag
from hyperpod_debugger.domain.redact import RedactingFilter, install_log_redaction, redact, redact_lines

RNG = random.Random(29)
B64 = string.ascii_letters + string.digits + "/+"


def _pick(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def access_key(temporary: bool = False) -> str:
    return ("ASIA" if temporary else "AKIA") + _pick(string.ascii_uppercase + "234567", 16)


def secret_key() -> str:
    while True:
        key = _pick(B64, 40)
        if any(c.islower() for c in key) and any(c.isupper() for c in key) and any(c.isdigit() for c in key):
            return key


def session_token() -> str:
    return "IQoJb3JpZ2luX2Vj" + _pick(B64, 300) + "=="


def _pem(key: object, fmt: serialization.PrivateFormat) -> str:
    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, fmt, serialization.NoEncryption()
    ).decode()


PRIVATE_KEYS = {
    "rsa-pkcs1": _pem(
        rsa.generate_private_key(public_exponent=65537, key_size=1024), serialization.PrivateFormat.TraditionalOpenSSL
    ),
    "ec-pkcs8": _pem(ec.generate_private_key(ec.SECP256R1()), serialization.PrivateFormat.PKCS8),
    "ed25519-openssh": _pem(ed25519.Ed25519PrivateKey.generate(), serialization.PrivateFormat.OpenSSH),
}


def _presigned(token: str, ak: str) -> tuple[str, str]:
    """A presigned S3 URL carrying ``token`` and ``ak``, and its signature."""
    signature = _pick("0123456789abcdef", 64)
    return (
        "https://amzn-s3-demo-bucket.s3.us-west-2.amazonaws.com/lifecycle/on_create.sh?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={ak}%2F20261202%2Fus-west-2%2Fs3%2Faws4_request&X-Amz-Date=20261202T100000Z"
        f"&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token={token.replace('/', '%2F')}"
        f"&X-Amz-Signature={signature}"
    ), signature


def corpus() -> list[tuple[str, str, list[str]]]:
    """(name, text, the secrets in it)."""
    ak, sk, tok = access_key(), secret_key(), session_token()
    tak = access_key(temporary=True)
    url, sig = _presigned(tok, tak)
    jwt_token = jwt.encode(
        {"sub": "system:serviceaccount:kube-system:aws-node", "exp": 1893456000}, sk, algorithm="HS256"
    )
    hook_path = f"/services/T{_pick(string.ascii_uppercase + string.digits, 10)}/B{_pick(string.ascii_uppercase + string.digits, 10)}/{_pick(string.ascii_letters + string.digits, 24)}"
    slack_token = (
        "xoxb-"
        + _pick(string.digits, 12)
        + "-"
        + _pick(string.digits, 13)
        + "-"
        + _pick(string.ascii_letters + string.digits, 24)
    )
    gh = "ghp_" + _pick(string.ascii_letters + string.digits, 36)
    password = _pick(string.ascii_letters + string.digits + "!#%^*", 14)
    cases = [
        ("xtrace export", f"+ export AWS_ACCESS_KEY_ID={ak}\n+ export AWS_SECRET_ACCESS_KEY={sk}", [ak, sk]),
        (
            "credentials file",
            f"[default]\naws_access_key_id = {ak}\naws_secret_access_key = {sk}\naws_session_token = {tok}",
            [ak, sk, tok],
        ),
        (
            "sts json",
            json.dumps(
                {
                    "Credentials": {
                        "AccessKeyId": tak,
                        "SecretAccessKey": sk,
                        "SessionToken": tok,
                        "Expiration": "2026-12-02T11:00:00Z",
                    }
                }
            ),
            [tak, sk, tok],
        ),
        (
            "imds json",
            json.dumps(
                {"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": tak, "SecretAccessKey": sk, "Token": tok}
            ),
            [tak, sk, tok],
        ),
        (
            "aws configure list",
            f"access_key     ****************{ak[-4:]} shared-credentials-file\n{ak} {sk}",
            [ak, sk],
        ),
        (
            "presigned url in a failure message",
            f"Lifecycle script download failed: 403 Forbidden fetching {url}",
            [sig, tok.replace("/", "%2F")],
        ),
        (
            "curl bearer",
            f'+ curl -sf -H "Authorization: Bearer {jwt_token}" https://kubernetes.default.svc/api',
            [jwt_token],
        ),
        ("kubeconfig token", f"    token: {jwt_token}", [jwt_token]),
        (
            "basic auth header",
            "+ curl -H 'Authorization: Basic ZGVwbG95Omh1bnRlcjJodW50ZXIy' https://registry.example/v2/",
            ["ZGVwbG95Omh1bnRlcjJodW50ZXIy"],
        ),
        (
            "slack webhook",
            f"+ curl -X POST -d @msg.json https://hooks.slack.com{hook_path}",
            [hook_path.rsplit("/", 1)[-1]],
        ),
        (
            "slack webhook path echoed by a proxy",
            f"upstream error: POST {hook_path} returned 502",
            [hook_path.rsplit("/", 1)[-1]],
        ),
        ("slack token", f"SLACK_BOT_TOKEN={slack_token}", [slack_token]),
        ("github token", f"+ git clone https://{gh}@github.com/example/private-setup.git", [gh]),
        (
            "url password",
            f"+ mount -t nfs ... ; pip install --index-url https://deploy:{password}@pypi.example/simple torch",
            [password],
        ),
        ("mysql password flag", f"+ mysql -u slurm --password={password} slurm_acct_db", [password]),
        ("env password", f"DB_PASSWORD: {password}", [password]),
        ("kernel line", f'[Wed Dec  2 10:00:00 2026] audit: cmdline="aws_secret_access_key={sk}"', [sk]),
    ]
    for name, pem in PRIVATE_KEYS.items():
        body = [line for line in pem.splitlines() if not line.startswith("-----")]
        cases.append((f"private key {name}", f"+ cat /root/.ssh/id\n{pem}", body))
    return cases


CORPUS = corpus()


@pytest.mark.parametrize(("name", "text", "secrets"), CORPUS, ids=[c[0] for c in CORPUS])
def test_nothing_of_a_credential_survives_a_finding(name: str, text: str, secrets: list[str]) -> None:
    # GIVEN the text as a finding's message, evidence (line by line, as node logs are quoted) and root cause
    finding = Finding(
        tag=Tag.FAIL,
        priority=Priority.P1,
        check="logs.lifecycle",
        section="D",
        message=f"Lifecycle script failed: {text}",
        evidence=text.split("\n"),
        root_cause=text,
        next_step=text,
    )
    stored = finding.model_dump_json()
    # THEN none of the secret survives anywhere in what is stored, and the kind is named
    for secret in secrets:
        assert secret not in stored, (name, secret)
    assert "[REDACTED " in stored


@pytest.mark.parametrize(("name", "text", "secrets"), CORPUS, ids=[c[0] for c in CORPUS])
def test_node_text_given_to_analyze_comes_back_redacted(name: str, text: str, secrets: list[str]) -> None:
    # GIVEN the credential inside kernel lines that the analysis quotes (an Xid line per line of the text)
    lines = [
        f"[Wed Dec  2 10:00:0{i % 10} 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=x, {part}"
        for i, part in enumerate(text.split("\n"))
    ]
    report = tools.analyze_probe_output(
        "ml.p5.48xlarge", outputs={"kernel_log": "\n".join(lines)}, now="2026-12-02T11:00:00Z"
    )
    out = report.model_dump_json()
    assert "Xid 79" in out
    for secret in secrets:
        assert secret not in out, (name, secret)


def test_a_private_key_over_many_lines_is_hidden_whole() -> None:
    pem = PRIVATE_KEYS["rsa-pkcs1"].splitlines()
    out = redact_lines(["before", *pem, "after"])
    assert out[0] == "before" and out[-1] == "after"
    assert all("REDACTED private-key" in line for line in out[1:-1])


# Lines that hold no credential, from the real outputs the project reads, must come through unchanged: a
# redaction that eats evidence hides the fault it was quoted for.
HARMLESS = [
    "NVRM: Xid (PCI:0000:53:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (sha1, lower-case hex)",
    "i-0123456789abcdef0 arn:aws:sagemaker:us-west-2:123456789012:cluster/abcd1234efgh",
    "AROAEXAMPLEID123456789 AIDAEXAMPLEUSERID12345 (role and user unique ids, not keys)",
    "kube-proxy token bucket refilled; tokens=10",
    "sshd[812]: Accepted publickey for ubuntu from 10.1.2.3 port 51324 ssh2: RSA SHA256:0a1B2c3D4e5F6g7H8i9J0kLmNoPqRsTuVwXyZaBcDeF",
    "Password authentication disabled by sshd_config",
    "+ aws s3 cp s3://amzn-s3-demo-bucket/lifecycle/on_create.sh /tmp/lcc/",
    "nvidia-smi: GPU-5f2a9c1e-8b7d-4e3f-a1b2-c3d4e5f60718 Pending: No",
]


@pytest.mark.parametrize("line", HARMLESS)
def test_lines_without_a_credential_are_kept_as_written(line: str) -> None:
    assert redact(line) == line


def test_the_real_corpus_of_node_outputs_is_not_touched() -> None:
    from pathlib import Path

    corpus_dir = Path(__file__).parents[1] / "fixtures" / "corpus"
    changed = []
    for path in sorted(corpus_dir.rglob("*.txt")):
        for line in path.read_text(errors="replace").splitlines():
            if redact(line) != line:
                changed.append((path.name, line[:120]))
    assert not changed, changed[:5]


# --------------------------------------------------------------------------- logs


def test_botocore_debug_bodies_are_redacted_in_every_handler() -> None:
    # GIVEN a process whose root logger writes somewhere, with redaction installed, and botocore at DEBUG
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    log = logging.getLogger("botocore.parsers")
    old_level, root_level = log.level, root.level
    try:
        install_log_redaction()
        log.setLevel(logging.DEBUG)
        root.setLevel(logging.DEBUG)
        hook = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/" + "z" * 24
        body = json.dumps({"Name": "hyperpod/slack", "SecretString": json.dumps({"webhook_url": hook})}).encode()
        # WHEN botocore logs GetSecretValue's response body, as it does at DEBUG
        log.debug("Response body:\n%r", body)
        logging.getLogger("hyperpod").error("delivery failed", extra={"reason": f"proxy said {hook}"})
    finally:
        log.setLevel(old_level)
        root.setLevel(root_level)
        root.removeHandler(handler)
    written = stream.getvalue()
    # THEN the webhook's secret path is nowhere in what was written
    assert "Response body" in written and "z" * 24 not in written and "REDACTED slack-webhook" in written


def test_the_filter_redacts_extras_and_tracebacks() -> None:
    record = logging.LogRecord("x", logging.ERROR, "p", 1, "failed for %s", ("AKIAABCDEFGHIJKLMNOP",), None)
    record.reason = "token=abcdefghijkl0123"
    try:
        raise RuntimeError("aws_secret_access_key=" + "A1b2" * 10)
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    RedactingFilter().filter(record)
    assert "AKIAABCDEFGHIJKLMNOP" not in record.getMessage()
    assert "abcdefghijkl0123" not in record.reason  # type: ignore[attr-defined]
    assert "A1b2" * 10 not in (record.exc_text or "")


def test_a_channel_error_holds_no_secret_so_no_dead_letter_reason_can() -> None:
    from functions.monitor.logic.outbox import ChannelError

    hook = "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/" + "q" * 24
    error = ChannelError(f"Slack refused the message (403): invalid_token for {hook}", permanent=True)
    assert "q" * 24 not in str(error) and "REDACTED slack-webhook" in str(error)


@pytest.mark.parametrize(
    "event",
    [{"detail": "\ud800 \uffff \ufffe \x00 \u202e"}, [[[[[]]]]], {"x": b"bytes", "y": {1, 2}}],
    ids=["characters-sqs-refuses", "nested", "not-json"],
)
def test_an_unprocessed_input_is_kept_in_characters_sqs_accepts(event: object) -> None:
    from functions.monitor.runtime import _kept_body

    body = _kept_body(event)
    # SQS's allowed characters: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF
    assert all(
        c in "\t\n\r" or 0x20 <= ord(c) <= 0xD7FF or 0xE000 <= ord(c) <= 0xFFFD or ord(c) >= 0x10000 for c in body
    )
    body.encode("utf-8")  # and it encodes


def test_an_input_nested_too_deep_to_serialise_is_still_kept() -> None:
    from functions.monitor.runtime import _kept_body

    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert _kept_body(deep) == "<list nested too deeply to keep>"
