"""Who may read /metrics: the answer for each outcome of the token and access reviews (pure)."""

from __future__ import annotations

import pytest

from multikueue.access import (
    UNAUTHORIZED,
    Answer,
    ReviewFailed,
    after_access_review,
    after_token_review,
    bearer_token,
)
from multikueue.kube.reviews import AccessDecision, UserInfo

ALICE = UserInfo("system:serviceaccount:monitoring:prometheus", "uid-1", ("system:serviceaccounts",))


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer two tokens", None),
    ],
)
def test_only_a_bearer_token_is_taken(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_no_token_or_an_unknown_one_is_401() -> None:
    assert after_token_review(None) == UNAUTHORIZED
    assert UNAUTHORIZED.status == 401


def test_a_known_identity_goes_on_to_authorisation() -> None:
    assert after_token_review(ALICE) is ALICE


@pytest.mark.parametrize(("answered", "status"), [(True, 500), (False, 503)])
def test_a_review_that_got_no_verdict_is_a_server_error_never_a_200(answered: bool, status: int) -> None:
    failure = ReviewFailed("TokenReview", "HTTP 403 Forbidden: cannot create tokenreviews", answered=answered)
    answer = after_token_review(failure)
    assert isinstance(answer, Answer)
    assert answer.status == status
    access = after_access_review(ALICE, "get", "/metrics", ReviewFailed("SubjectAccessReview", "x", answered))
    assert access.status == status
    assert "Forbidden" not in access.text, "the reason stays in the controller's log, not in the scraper's answer"


def test_rbac_decides_between_200_and_403() -> None:
    assert after_access_review(ALICE, "get", "/metrics", AccessDecision(True, "RBAC: allowed")).status == 200
    denied = after_access_review(ALICE, "get", "/metrics", AccessDecision(False))
    assert denied.status == 403
    assert ALICE.username in denied.text
    assert "multikueue-metrics-reader" in denied.text


def test_user_info_is_read_from_a_token_review_and_hashable() -> None:
    user = UserInfo.of({"username": "u", "uid": "1", "groups": ["g1", "g2"],
                        "extra": {"b": ["2"], "a": ["1", "0"]}})  # fmt: skip
    assert user == UserInfo("u", "1", ("g1", "g2"), (("a", ("1", "0")), ("b", ("2",))))
    assert hash(user) == hash(UserInfo.of({"username": "u", "uid": "1", "groups": ["g1", "g2"],
                                           "extra": {"a": ["1", "0"], "b": ["2"]}}))  # fmt: skip
