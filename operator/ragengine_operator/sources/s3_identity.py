"""S3 credentials from the sync pod's workload identity (IRSA): STS AssumeRoleWithWebIdentity.

On EKS, a pod whose ServiceAccount carries ``eks.amazonaws.com/role-arn`` gets from the pod identity webhook
``AWS_ROLE_ARN``, ``AWS_WEB_IDENTITY_TOKEN_FILE`` (a projected token for the audience sts.amazonaws.com,
mounted whatever ``automountServiceAccountToken`` says) and usually ``AWS_REGION``. A source without a
Secret trades that token at STS for the role's temporary credentials, as the AWS SDKs' default chain
does: one unsigned POST to ``https://sts.<region>.amazonaws.com`` (``AWS_ENDPOINT_URL_STS`` overrides it,
as for the SDKs), under the same egress rules and pinned connection as every fetch. Without those
variables (no workload identity, the subprocess mode's empty environment) there is nothing to trade and
requests go unsigned (a public bucket).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx
from defusedxml import ElementTree

from ragengine_operator.net.egress import EgressPolicy
from ragengine_operator.net.transport import BoundedTransport, EgressRefused
from ragengine_operator.sources.fetched import Deadline, FetchError
from ragengine_operator.sources.s3 import S3Credentials, _child, _local

ROLE_ENV, TOKEN_ENV, ENDPOINT_ENV = "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL_STS"
SESSION_NAME = "ragengine-source-sync"
DURATION_S = 3600  # a sync's deadline is 30 minutes by default
MAX_ANSWER = 64 * 1024
CALL_TIMEOUT_S = 60.0


def _find(node: object, name: str) -> object | None:
    for sub in node:  # type: ignore[attr-defined]
        if _local(sub.tag) == name:
            return sub
        found = _find(sub, name)
        if found is not None:
            return found
    return None


def web_identity(env: Mapping[str, str], region: str, policy: EgressPolicy, deadline: Deadline) -> S3Credentials | None:
    """The role's credentials, or None when the pod has no web identity; FetchError when STS refuses it."""
    role, token_file = env.get(ROLE_ENV), env.get(TOKEN_ENV)
    if not role or not token_file:
        return None
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise FetchError(f"the web identity token {token_file} cannot be read ({exc.strerror})") from None
    url = httpx.URL(env.get(ENDPOINT_ENV) or f"https://sts.{env.get('AWS_REGION') or region}.amazonaws.com")
    form = {"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": role,
            "RoleSessionName": SESSION_NAME, "WebIdentityToken": token, "DurationSeconds": str(DURATION_S)}
    try:
        with httpx.Client(transport=BoundedTransport(CALL_TIMEOUT_S, MAX_ANSWER, policy, deadline),
                          follow_redirects=False, trust_env=False) as http:
            resp = http.post(url.copy_with(path="/"), data=form)
    except EgressRefused as exc:
        raise FetchError(f"STS {exc}") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"STS at {url} unreachable ({type(exc).__name__}: {exc})") from None
    try:
        root = ElementTree.fromstring(resp.content)
    except (ElementTree.ParseError, ValueError):
        root = None
    if resp.status_code != 200 or root is None:
        error = _find(root, "Error") if root is not None else None
        detail = (f"{_child(error, 'Code')}: {(_child(error, 'Message') or '').strip()[:300]}" if error is not None
                  else f"HTTP {resp.status_code}")
        raise FetchError(f"STS refused the web identity for role {role} ({detail}): check the role's trust policy "
                         "(the OIDC provider, the ServiceAccount as subject)")
    creds = _find(root, "Credentials")
    key, secret = (_child(creds, "AccessKeyId"), _child(creds, "SecretAccessKey")) if creds is not None else (None, None)
    if not key or not secret:
        raise FetchError(f"STS answered role {role} without credentials")
    return S3Credentials(key.strip(), secret.strip(), (_child(creds, "SessionToken") or "").strip() or None)
