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
    """Seconds to keep serving after the process was told to stop, or stopped by itself.

    Every stop of a replica serving the webhook drains it: SIGTERM (a Pod's termination), a lost Lease or a failure
    end the process while its Pod is still a ready endpoint, and the API server keeps calling it until the endpoint
    has left. Only Ctrl-C (SIGINT) at a terminal stops at once. Only the webhook needs it: the API server calls it
    on users' behalf, whereas a missed scrape or probe costs nothing.
    """
    if signum == signal.SIGINT or not serves_webhook:
        return 0.0
    return max(0.0, delay)
