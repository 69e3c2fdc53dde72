"""When a credential stops working, read from the credential itself (``kube/expiry.py``, ``Credentials.expiry``)."""

from __future__ import annotations

import base64
import datetime
import json
import sys

from multikueue.kube import expiry
from multikueue.kube.credentials import Credentials
from multikueue.kube.kubeconfig import ClusterAccess, ExecPlugin
from multikueue.pki import CertificateAuthority


def jwt(claims: dict[str, object]) -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.signature"


def test_a_tokens_exp_a_certificates_not_after_and_a_timestamp() -> None:
    assert expiry.token_expiry(jwt({"sub": "system:serviceaccount:ns:sa", "exp": 1_900_000_000})) == 1_900_000_000.0
    assert expiry.token_expiry(jwt({"sub": "legacy"})) is None, "a legacy ServiceAccount token never expires"
    assert expiry.token_expiry("opaque-token") is None
    assert expiry.token_expiry("a.%%%.c") is None
    assert expiry.token_expiry(jwt({"exp": True})) is None
    ca = CertificateAuthority(validity=datetime.timedelta(days=3))
    leaf = ca.issue("client", client=True)
    found = expiry.certificate_expiry(leaf.cert_pem)
    in_three_days = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)).timestamp()
    assert found is not None
    assert abs(found - in_three_days) < 60
    assert expiry.certificate_expiry(b"not a certificate") is None
    assert (
        expiry.timestamp_expiry("2030-01-01T00:00:00Z")
        == datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC).timestamp()
    )
    assert expiry.timestamp_expiry("soon") is None
    assert expiry.earliest(None, 5.0, 3.0) == 3.0
    assert expiry.earliest(None, None) is None


def test_the_credential_in_use_says_when_it_lapses_and_whether_it_renews_itself() -> None:
    fixed = Credentials(ClusterAccess(server="http://k:80", token=jwt({"exp": 1_900_000_000})))
    assert (fixed.expiry(), fixed.renewable) == (1_900_000_000.0, False)
    assert Credentials(ClusterAccess(server="http://k:80", token="opaque")).expiry() is None


async def test_an_exec_credentials_expiration_timestamp_is_its_expiry() -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": "t", "expirationTimestamp": "2031-05-01T10:00:00Z"}}  # fmt: skip
    plugin = ExecPlugin(sys.executable, ("-c", f"print({json.dumps(json.dumps(credential))})"))
    credentials = Credentials(ClusterAccess(server="http://k:80", exec=plugin))
    assert credentials.expiry() is None, "not known before the plugin runs"
    await credentials.authorization()
    assert credentials.expiry() == datetime.datetime(2031, 5, 1, 10, tzinfo=datetime.UTC).timestamp()
    assert credentials.renewable
