"""Token renewal's pure parts: when (``clusters/renewal.py``), what a ServiceAccount token says of itself
(``kube/serviceaccounts.py``), which kubeconfig changes are only a credential, and the settings' validation."""

from __future__ import annotations

import pytest

from multikueue.clusters import renewal
from multikueue.config import ConfigError, parse_configuration
from multikueue.kube.credentials import Credentials, header_only_change
from multikueue.kube.kubeconfig import ClusterAccess, ExecPlugin
from multikueue.kube.serviceaccounts import ServiceAccountToken, service_account_token
from tests.unit.test_expiry import jwt

IAT = 1_800_000_000.0


def test_a_token_is_renewed_once_80_percent_of_its_life_has_passed_as_the_kubelet_does() -> None:
    exp = IAT + 3600
    assert renewal.renew_in(IAT, exp, IAT + 60, 0.8) == pytest.approx(2880 - 60)
    assert renewal.renew_in(IAT, exp, IAT + 2880, 0.8) == 0  # due now
    assert renewal.renew_in(IAT, exp, IAT + 3000, 0.8) < 0  # overdue: still now
    # A configured share: a 600 s token due 6 s after it was issued (what the integration test relies on).
    assert renewal.renew_in(IAT, IAT + 600, IAT, 0.01) == pytest.approx(6)
    # A year-long token is renewed once a day, as the kubelet's projected tokens are.
    assert renewal.renew_in(IAT, IAT + 365 * 86400, IAT, 0.8) == 86400


def test_the_lifetime_asked_for_is_the_tokens_own_or_the_configured_one_never_below_ten_minutes() -> None:
    assert renewal.requested_lifetime(86400.0, None) == 86400
    assert renewal.requested_lifetime(86400.0, 7200.0) == 7200
    assert renewal.requested_lifetime(300.0, None) == 600


def test_retries_back_off_but_never_past_the_middle_of_what_is_left() -> None:
    assert [renewal.retry_in(n, IAT + 10_000, IAT) for n in (1, 2, 3, 8, 30)] == [5, 10, 20, 320, 320]
    assert renewal.retry_in(8, IAT + 100, IAT) == 50
    assert renewal.retry_in(8, IAT + 1, IAT) == 1  # at least a second apart, even at the end


def test_only_the_token_changes_in_the_kubeconfig_text() -> None:
    text = b"# keep me\nusers:\n- name: u\n  user:\n    token: OLD.TOKEN.x\n"
    assert renewal.with_token(text, "OLD.TOKEN.x", "NEW.TOKEN.y") == text.replace(b"OLD.TOKEN.x", b"NEW.TOKEN.y")
    with pytest.raises(ValueError, match="not in the kubeconfig"):
        renewal.with_token(text, "ANOTHER", "NEW")


def test_a_service_account_token_names_its_account_and_its_timing() -> None:
    token = jwt({"sub": "system:serviceaccount:multikueue-system:dispatcher", "iat": IAT, "exp": IAT + 600,
                 "aud": ["https://kubernetes.default.svc"]})  # fmt: skip
    assert service_account_token(token) == ServiceAccountToken(
        "multikueue-system", "dispatcher", IAT, IAT + 600, ("https://kubernetes.default.svc",)
    )
    assert (
        service_account_token(jwt({"sub": "system:serviceaccount:ns:sa", "iat": IAT, "exp": IAT, "aud": "a"})) is None
    )
    assert service_account_token(jwt({"sub": "system:serviceaccount:ns:sa", "exp": IAT})) is None  # no iat
    assert service_account_token(jwt({"sub": "system:serviceaccount:ns", "iat": IAT, "exp": IAT + 1})) is None
    assert service_account_token(jwt({"sub": "alice@example.com", "iat": IAT, "exp": IAT + 1})) is None  # OIDC
    assert service_account_token(jwt({"sub": "system:serviceaccount:ns:sa"})) is None  # a legacy Secret token
    assert service_account_token("opaque") is None


def test_only_a_change_of_the_header_credential_is_swapped_in_place() -> None:
    base = ClusterAccess("https://worker:6443", ca="CA", token="old")
    assert header_only_change(base, ClusterAccess("https://worker:6443", ca="CA", token="new"))
    assert header_only_change(base, ClusterAccess("https://worker:6443", ca="CA", basic=("u", "p")))
    for other in (
        ClusterAccess("https://elsewhere:6443", ca="CA", token="new"),
        ClusterAccess("https://worker:6443", ca="ANOTHER CA", token="new"),
        ClusterAccess("https://worker:6443", ca="CA", token="new", tls_server_name="worker"),
        ClusterAccess("https://worker:6443", ca="CA", token="new", proxy_url="http://proxy:3128"),
        ClusterAccess("https://worker:6443", ca="CA", exec=ExecPlugin("plugin")),
    ):
        assert not header_only_change(base, other), other


async def test_swapped_credentials_present_the_new_token_over_the_same_tls_context() -> None:
    old = Credentials(ClusterAccess("https://worker:6443", token="old"))
    new = old.with_header_of(ClusterAccess("https://worker:6443", token="new"))
    assert await new.authorization() == "Bearer new"
    assert new.ssl is old.ssl


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        (
            "{renewAfter: 1}",
            "dispatcher.tokenRenewal.renewAfter: must be a fraction of the token's lifetime between "
            "0 and 1 (such as 0.8), got 1",
        ),
        ("{renewAfter: '80%'}", "dispatcher.tokenRenewal.renewAfter: must be a fraction"),
        (
            "{expiration: 5m}",
            "dispatcher.tokenRenewal.expiration: must be at least 10m (the API server refuses "
            "shorter tokens), got 300s",
        ),
    ],
)
def test_bad_renewal_settings_are_one_clear_line(section: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_configuration(f"dispatcher: {{tokenRenewal: {section}}}")
    assert len(raised.value.problems) == 1
    assert raised.value.problems[0].startswith(problem), raised.value.problems


def test_renewal_defaults_to_the_kubelets_share() -> None:
    settings = parse_configuration("").dispatcher.token_renewal
    assert (settings.renew_after, settings.expiration) == (0.8, None)
    assert (
        parse_configuration(
            "dispatcher: {tokenRenewal: {renewAfter: 0.5, expiration: 1h}}"
        ).dispatcher.token_renewal.expiration
        == 3600
    )
