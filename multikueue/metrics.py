"""Prometheus metrics (served by ``endpoints``).

Kueue's two MultiKueue counters keep their names and labels (``multikueue_workloads_dispatched_total`` and
``multikueue_workloads_admitted_total``), so dashboards built for Kueue keep working. One registry per
``Metrics`` object: several controllers in one process (tests) do not share counters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from multikueue.clusterqueues import Queue, quantity_value

# Seconds: dispatch goes through several API round trips; status sync should stay well under a second.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class _Waiting(Collector):
    """``multikueue_runs_waiting_for_a_worker{mode}``, counted from the caches when scraped."""

    def __init__(self) -> None:
        self.count: Callable[[], dict[str, int]] = dict

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "multikueue_runs_waiting_for_a_worker",
            "Runs no worker can take now: every nominated worker's Kueue cannot fit the copy (mode Kueue), or no "
            "worker fits the placement (mode Direct).",
            labels=["mode"],
        )
        for mode, count in sorted(self.count().items()):
            family.add_metric([mode], count)
        return [family]


class _WorkerQueues(Collector):
    """``multikueue_worker_clusterqueue_*``: each connected worker's ClusterQueues as last listed (``clusters/queues``),
    usage against nominal quota per flavor and resource, and Workloads by state."""

    def __init__(self) -> None:
        self.queues: Callable[[], dict[str, list[Queue]]] = dict

    def collect(self) -> list[GaugeMetricFamily]:
        labels = ["worker", "cluster_queue", "flavor", "resource"]
        usage = GaugeMetricFamily(
            "multikueue_worker_clusterqueue_usage",
            "Quota in use in a worker's ClusterQueue, per flavor and resource.",
            labels=labels,
        )
        nominal = GaugeMetricFamily(
            "multikueue_worker_clusterqueue_nominal_quota",
            "A worker ClusterQueue's nominal quota, per flavor and resource.",
            labels=labels,
        )
        workloads = GaugeMetricFamily("multikueue_worker_clusterqueue_workloads",
                                      "Workloads in a worker's ClusterQueue, by state (pending, reserving, admitted).",
                                      labels=["worker", "cluster_queue", "state"])  # fmt: skip
        for worker, queues in sorted(self.queues().items()):
            for queue in queues:
                for state in ("pending", "reserving", "admitted"):
                    workloads.add_metric([worker, queue.name, state], getattr(queue, state))
                for u in queue.usage:
                    with contextlib.suppress(ValueError):  # a quantity Kueue would not write
                        usage.add_metric([worker, queue.name, u.flavor, u.resource], quantity_value(u.used))
                        nominal.add_metric([worker, queue.name, u.flavor, u.resource], quantity_value(u.nominal))
        return [usage, nominal, workloads]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.waiting = _Waiting()  # the controllers set ``waiting.count``
        r.register(self.waiting)
        self.worker_queues = _WorkerQueues()  # the manager generation sets ``worker_queues.queues``
        r.register(self.worker_queues)
        self.workloads_dispatched = Counter(
            "multikueue_workloads_dispatched_total",
            "Workload copies created on workers (Kueue's name).",
            ["cluster_queue", "cluster"],
            registry=r,
        )
        self.workloads_admitted = Counter(
            "multikueue_workloads_admitted_total",
            "Workloads whose check became Ready on a worker (Kueue's name).",
            ["cluster_queue", "cluster"],
            registry=r,
        )
        self.objects_dispatched = Counter(
            "multikueue_objects_dispatched_total", "Objects created on a worker.", ["kind", "cluster"], registry=r
        )
        self.objects_redispatched = Counter(
            "multikueue_objects_redispatched_total",
            "Runs that left their worker to be dispatched again (Kueue mode: checks set to Retry).",
            ["kind", "cluster"],
            registry=r,
        )
        self.objects_finished = Counter(
            "multikueue_objects_finished_total",
            "Runs finished from a worker (Kueue mode: their manager Workloads; Direct mode: their objects).",
            ["kind", "cluster", "reason"],
            registry=r,
        )
        self.dispatch_latency = Histogram(
            "multikueue_dispatch_latency_seconds",
            "From quota reserved on the manager to the object created on a worker.",
            ["kind", "cluster"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.status_sync_lag = Histogram(
            "multikueue_status_sync_lag_seconds",
            "From a worker status change observed to the manager status written.",
            ["kind", "cluster"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.worker_connected = Gauge(
            "multikueue_worker_connected", "1 while the worker's watches are established.", ["cluster"], registry=r
        )
        self.credentials_expiry = Gauge(
            "multikueue_worker_credentials_expiry_timestamp_seconds",
            "When the credential this controller uses for the worker stops working (seconds since the epoch), as "
            "the credential says: a token's exp, a client certificate's notAfter, an exec credential's "
            "expirationTimestamp. renewable: fetched again on its own (exec plugin, tokenFile), or fixed in the "
            "kubeconfig Secret until replaced.",
            ["cluster", "renewable"],
            registry=r,
        )
        self.api_errors = Counter(
            "multikueue_api_errors_total",
            "Failed requests, per cluster ('manager' or the worker's name) and HTTP status (or 'connection'); "
            "409 is a write based on a stale read.",
            ["cluster", "code"],
            registry=r,
        )
        self.api_requests = Counter(
            "multikueue_api_requests_total",
            "Requests this controller sent, per cluster ('manager' or the worker's name) and HTTP method.",
            ["cluster", "method"],
            registry=r,
        )
        self.config_reloads = Counter(
            "multikueue_config_reloads_total",
            "ConfigMap changes seen: applied, or invalid (the last good configuration is kept).",
            ["result"],
            registry=r,
        )
        for result in ("applied", "invalid"):  # both known up front: exported at 0, so alerts can rate() them
            self.config_reloads.labels(result)
        self.config_valid = Gauge(
            "multikueue_config_last_reload_valid", "0 while the ConfigMap holds an invalid configuration.", registry=r
        )
        self.config_valid.set(1)
        # Labelled, so a process serving no webhook exports neither (an unlabelled gauge reads 0: a false alert).
        self.webhook_ca_bundle_ok = Gauge(
            "multikueue_webhook_ca_bundle_in_sync",
            "1 while the webhook configuration's caBundle trusts the certificate this replica serves (it is written "
            "again whenever it differs); 0: the API servers may refuse every create of a configured kind.",
            ["configuration"],
            registry=r,
        )
        self.webhook_certificate_expiry_seconds = Gauge(
            "multikueue_webhook_certificate_expiry_timestamp_seconds",
            "When the certificate this replica's admission webhook serves expires (Unix seconds).",
            ["source"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "multikueue_workqueue_depth", "Keys waiting in a controller's queue.", ["controller"], registry=r
        )
        self.queue_wait = Histogram(
            "multikueue_workqueue_wait_seconds",
            "From a key first queued to its reconcile starting.",
            ["controller"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            "multikueue_reconcile_errors_total", "Reconciles that failed and were retried.", ["controller"], registry=r
        )
        self.metrics_requests = Counter(
            "multikueue_metrics_requests_total",
            "Requests to /metrics by answer: 200, 401 (no token, or one the API server does not authenticate), 403 "
            "(RBAC does not allow get on /metrics), 500 or 503 (a TokenReview or SubjectAccessReview failed).",
            ["code"],
            registry=r,
        )

    # ControllerObserver
    def requests_to(self, cluster: str) -> tuple[Callable[[str], None], Callable[[str], None]]:
        """The ``on_request`` and ``on_error`` hooks a client to ``cluster`` is built with: its requests counted by
        method, its failures by HTTP status (or ``connection``)."""
        requests, errors = self.api_requests, self.api_errors
        return (lambda method: requests.labels(cluster, method).inc()), (
            lambda code: errors.labels(cluster, code).inc()
        )

    def started(self, controller: str, waited: float, depth: int) -> None:
        self.queue_wait.labels(controller).observe(waited)
        self.queue_depth.labels(controller).set(depth)
        # A zero series from the first reconcile on: rate() and the alert see the controller before it first fails.
        self.reconcile_errors.labels(controller)

    def failed(self, controller: str) -> None:
        self.reconcile_errors.labels(controller).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
