"""The soak's fault schedule: one fault every interval, in turn, each on a target drawn with the soak's seed.

- ``worker-pause``: a worker's kube-apiserver SIGSTOPped for 5-40 s (hung: sockets open, no answer, not even to a
  write it has carried out), then SIGCONTed;
- ``leader-kill``: the dispatcher replica holding the Lease SIGKILLed and started again (as kubelet restarts a
  container); the other replica takes over when the Lease expires;
- ``worker-kill``: a worker's kube-apiserver SIGKILLed, started again 10 s later;
- ``manager-restart``: the manager's kube-apiserver stopped (SIGTERM) and started again;
- ``etcd-pause``: etcd SIGSTOPped for 5-15 s: every cluster's writes and watches stall at once;
- ``secret-rotate``: a worker's kubeconfig Secret replaced by one with a new ServiceAccount token;
- ``config-reload``: the configuration's ConfigMap changed (``gcInterval`` flips between 1m and 2m): every replica
  reloads;
- ``crd-upgrade``: the manager's PipelineRun CRD updated (a printer column added): its published schema changes.

Every outage is far shorter than ``workerLostTimeout`` (15 min): no run may reach a second worker.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import yaml

from bench.dispatcher import Dispatcher
from bench.faults import Outages, ticks
from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed.testbed import TestBed

CYCLE = ("worker-pause", "leader-kill", "worker-kill", "manager-restart", "etcd-pause", "secret-rotate",
         "config-reload", "crd-upgrade")  # fmt: skip
PAUSE_SECONDS = (5.0, 40.0)
ETCD_SECONDS = (5.0, 15.0)
KILLED_SECONDS = 10.0
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
CONFIG_KEY = "controller_manager_config.yaml"


@dataclass
class Fault:
    at: float  # seconds since the soak began
    kind: str
    target: str
    seconds: float  # how long it lasted (0: instantaneous)


@dataclass
class Schedule:
    """Injects the faults and keeps their log; ``outages`` is what is out right now (workers, etcd, the manager)."""

    bed: TestBed
    replicas: list[Dispatcher]
    manager: Callable[[], ApiClient]  # the bench's manager client (replaced after a manager restart: no)
    rotate_secret: Callable[[str], Awaitable[None]]  # a worker's Secret rewritten with a fresh token
    config: tuple[str, str]  # the configuration's ConfigMap: namespace, name
    workers: list[str]
    rng: random.Random
    say: Callable[[str], None]
    started: float
    kinds: tuple[str, ...] = CYCLE
    log: list[Fault] = field(default_factory=list)
    outages: Outages = field(default_factory=Outages)
    # (killed, the Lease next renewed by a live leader or None if not within 10 minutes), monotonic times
    leader_kills: list[tuple[float, float | None]] = field(default_factory=list)
    returns: list[tuple[str, float]] = field(default_factory=list)  # (worker, monotonic time it was back)
    on_return: Callable[[str, float], object] | None = None  # told when a worker is back
    _reloads: int = 0

    async def every(self, interval: float, stop: anyio.Event, tg: Any) -> None:
        """One fault every ``interval`` seconds, in turn, until ``stop`` (bounded in count)."""
        async for i in ticks(interval, stop):
            kind = self.kinds[i % len(self.kinds)]
            try:
                await self.inject(kind, tg)
            except Exception as e:  # a fault that could not be injected is reported, and the soak goes on
                self.say(f"fault {kind} could not be injected: {e}")

    async def all_back(self) -> None:
        """Until every paused or killed server is back (bounded: the longest outage and a restart)."""
        await self.outages.all_back(PAUSE_SECONDS[1] + 180)

    async def inject(self, kind: str, tg: Any) -> None:
        inject = {
            "worker-pause": self._worker_pause, "worker-kill": self._worker_kill, "leader-kill": self._leader_kill,
            "manager-restart": self._manager_restart, "etcd-pause": self._etcd_pause,
            "secret-rotate": self._secret_rotate, "config-reload": self._config_reload, "crd-upgrade": self._crd,
        }[kind]  # fmt: skip
        await inject(tg)

    def _logged(self, kind: str, target: str, seconds: float) -> None:
        self.log.append(Fault(round(time.monotonic() - self.started, 2), kind, target, seconds))
        self.say(f"fault: {kind} {target} {f'for {seconds:g} s' if seconds else ''}".rstrip())

    def _victim(self) -> str | None:
        up = [w for w in self.workers if w not in self.outages.down]
        return self.rng.choice(up) if up else None

    async def _worker_pause(self, tg: Any) -> None:
        if (victim := self._victim()) is None:
            return
        seconds = round(self.rng.uniform(*PAUSE_SECONDS), 1)
        self.outages.out(victim)
        await anyio.to_thread.run_sync(self.bed.pause_apiserver, victim)
        self._logged("worker-pause", victim, seconds)
        tg.start_soon(self._return, victim, seconds, lambda: self.bed.resume_apiserver(victim, wait=True))

    async def _worker_kill(self, tg: Any) -> None:
        if (victim := self._victim()) is None:
            return
        self.outages.out(victim)
        self.bed.stop_apiserver(victim, kill=True)
        self._logged("worker-kill", victim, KILLED_SECONDS)
        tg.start_soon(self._return, victim, KILLED_SECONDS, lambda: self.bed.start_apiserver(victim))

    async def _return(self, victim: str, seconds: float, back: Callable[[], None]) -> None:
        await anyio.sleep(seconds)
        await anyio.to_thread.run_sync(back)
        self.outages.back(victim)
        if victim in self.workers:
            self.returns.append((victim, time.monotonic()))
            if self.on_return is not None:
                self.on_return(victim, time.monotonic())
        self.say(f"{victim} is back")

    async def _leader_kill(self, tg: Any) -> None:
        lease = await Objects(self.manager(), LEASES).get("multikueue-dispatcher", self.config[0])
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
        replica = next((r for r in self.replicas if r.identity == holder), None)
        if replica is None:
            self.say(f"no replica holds the Lease (holder {holder!r}): no leader to kill")
            return
        killed, renewed = time.monotonic(), ((lease or {}).get("spec") or {}).get("renewTime")
        replica.kill()
        replica.start()
        self._logged("leader-kill", holder, 0.0)
        tg.start_soon(self._new_leader, killed, renewed)

    async def _new_leader(self, killed: float, renewed: str | None) -> None:
        """When the Lease is next renewed: by the other replica once it expires, or by the killed one started again,
        which keeps its identity (as a restarted Pod keeps its name) and so resumes its own Lease at once."""
        leases = Objects(self.manager(), LEASES)
        for _ in range(6000):  # 10 minutes at most
            with contextlib.suppress(Exception):  # the manager may be restarting: try again
                lease = await leases.get("multikueue-dispatcher", self.config[0])
                if ((lease or {}).get("spec") or {}).get("renewTime") not in (None, renewed):
                    self.leader_kills.append((killed, time.monotonic()))
                    return
            await anyio.sleep(0.1)
        self.leader_kills.append((killed, None))

    async def _manager_restart(self, tg: Any) -> None:
        self.outages.out("manager")
        self.bed.stop_apiserver("manager")
        self._logged("manager-restart", "manager", 0.0)
        tg.start_soon(self._return, "manager", 0.0, lambda: self.bed.start_apiserver("manager"))

    async def _etcd_pause(self, tg: Any) -> None:
        seconds = round(self.rng.uniform(*ETCD_SECONDS), 1)
        self.outages.out("etcd")
        self.bed.pause_etcd()
        self._logged("etcd-pause", "etcd", seconds)
        tg.start_soon(self._return, "etcd", seconds, self.bed.resume_etcd)

    async def _secret_rotate(self, tg: Any) -> None:
        victim = self.rng.choice(self.workers)
        await self.rotate_secret(victim)
        self._logged("secret-rotate", victim, 0.0)

    async def _config_reload(self, tg: Any) -> None:
        namespace, name = self.config
        config_maps = Objects(self.manager(), Resource("", "v1", "configmaps", "ConfigMap"))
        current = await config_maps.get(name, namespace)
        document = yaml.safe_load(((current or {}).get("data") or {})[CONFIG_KEY])
        self._reloads += 1
        document["multiKueue"]["gcInterval"] = "2m" if self._reloads % 2 else "1m"
        await config_maps.patch(name, {"data": {CONFIG_KEY: yaml.safe_dump(document)}}, namespace)
        self._logged("config-reload", f"gcInterval={document['multiKueue']['gcInterval']}", 0.0)

    async def _crd(self, tg: Any) -> None:
        crds = Objects(self.manager(), CRDS)
        crd = await crds.get("pipelineruns.tekton.dev")
        assert crd is not None
        versions = crd["spec"]["versions"]
        for version in versions:
            columns = version.setdefault("additionalPrinterColumns", [])
            columns.append({"name": f"Soak{len(self.log)}", "type": "string", "jsonPath": ".metadata.uid"})
        await crds.patch("pipelineruns.tekton.dev", {"spec": {"versions": versions}})
        self._logged("crd-upgrade", "pipelineruns.tekton.dev", 0.0)
