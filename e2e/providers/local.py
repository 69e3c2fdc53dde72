"""``local``: the process-based test bed (etcd + three kube-apiservers on 127.0.0.1) and the dispatcher as a
child process. Needs only the binaries ``make test`` obtains."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from e2e.providers import Environment, dispatcher_args
from multikueue_testbed import TestBed, crds
from multikueue_testbed.dispatcher import run_argv
from multikueue_testbed.processes import ManagedProcess
from multikueue_testbed.testbed import free_port


class LocalEnvironment(Environment):
    name = "local"

    def __init__(self) -> None:
        self.bed = TestBed()
        self.dispatcher: ManagedProcess | None = None

    def start(self) -> None:
        self.bed.start()
        crds.install_on_bed(self.bed)

    def stop(self) -> None:
        self.stop_dispatcher(kill=True)
        self.bed.stop()

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        return self.bed.cluster(cluster).kubeconfig

    @property
    def kubeconfig_path(self) -> Path:
        return self.bed.kubeconfig_path

    @property
    def kubectl(self) -> str:
        assert self.bed.binaries.kubectl is not None, "kubectl is part of the test bed's binaries"
        return str(self.bed.binaries.kubectl)

    def server_seen_by_dispatcher(self, cluster: str) -> str:
        return self.bed.cluster(cluster).url

    @property
    def _workdir(self) -> Path:
        assert self.bed.workdir is not None
        return self.bed.workdir

    def start_dispatcher(self, manager_kubeconfig: dict[str, Any] | None = None) -> None:
        path = self._workdir / "dispatcher.kubeconfig"
        if manager_kubeconfig is not None:
            path.write_text(yaml.safe_dump(manager_kubeconfig))
        argv = run_argv(path, *dispatcher_args(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"))
        # Appending keeps the log of a dispatcher that was killed and started again.
        self.dispatcher = ManagedProcess("dispatcher", argv, self._workdir / "dispatcher.log")
        self.dispatcher.start()

    def stop_dispatcher(self, *, kill: bool = False) -> None:
        if self.dispatcher is None or not self.dispatcher.running:
            return
        self.dispatcher.kill() if kill else self.dispatcher.stop(grace=30)

    def dispatcher_log(self) -> str:
        return self.dispatcher.log_tail(60) if self.dispatcher else "(never started)"

    def lose_worker(self, worker: str) -> None:
        self.bed.stop_apiserver(worker, kill=True)

    def restore_worker(self, worker: str) -> None:
        self.bed.start_apiserver(worker)
