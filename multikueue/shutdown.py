"""How long a stopping process stays reachable before it closes its listeners.

A Pod being deleted gets SIGTERM at the same moment its endpoint starts to leave the Service: the EndpointSlice is
updated, then every node's kube-proxy rewrites its rules. Until that has happened the API server still sends
admission requests to this Pod, so closing the webhook at once refuses users' creates (``failurePolicy: Fail``).
The process therefore fails readiness, keeps answering for a delay, and only then closes (Kubernetes' advice for
graceful termination; kube-apiserver's ``--shutdown-delay-duration`` is the same idea).
"""

from __future__ import annotations

import signal

DEFAULT_SHUTDOWN_DELAY = 5.0  # seconds: endpoint removal reaches kube-proxy within a second or two in practice


def drain_delay(signum: int | None, serves_webhook: bool, delay: float) -> float:
    """Seconds to keep serving after the process was told to stop.

    Only SIGTERM (a Pod's termination) waits: Ctrl-C at a terminal stops at once, and a process that ended for
    another reason (a lost Lease) is not being removed from a Service. Only the webhook needs it: the API server
    calls it on users' behalf, whereas a missed scrape or probe costs nothing.
    """
    if signum != signal.SIGTERM or not serves_webhook:
        return 0.0
    return max(0.0, delay)
