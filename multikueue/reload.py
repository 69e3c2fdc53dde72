"""The configuration in force and the valid changes to it: read from a ConfigMap key, checked whole before use.

A change is applied only once it parses and (on the manager) every kind it names is spelt as the cluster serves
it; anything else is refused once, where whoever edits the ConfigMap looks (an Event on it, a metric, a log line),
and the running configuration is kept: nothing is restarted for a change that will not be used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from multikueue.config import ConfigError, Configuration, parse_configuration
from multikueue.kube import core, events
from multikueue.kube.client import ApiClient
from multikueue.kube.discovery import KindMisspelt, KindUnavailable, discover_resource
from multikueue.kube.errors import TRANSIENT, ApiError, KubeError, describe
from multikueue.metrics import Metrics
from multikueue.runtime.informer import DELETED, Informer

log = structlog.get_logger(__name__)
Object = dict[str, Any]
RECHECK_SECONDS = 5.0  # a change whose kinds could not be checked (no answer) is judged again after this
KindCheck = Callable[[Configuration], Awaitable[None]]


@dataclass(frozen=True)
class ConfigSource:
    """Where the configuration lives: a key of a ConfigMap, watched for changes while the process runs."""

    namespace: str
    name: str
    key: str

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name} key {self.key}"

    def parse(self, data: dict[str, str] | None) -> Configuration:
        data = data or {}
        if self.key not in data:
            have = ", ".join(sorted(data)) or "none"
            raise ConfigError(str(self), [f"no key {self.key!r} in the ConfigMap (it has: {have})"])
        return parse_configuration(data[self.key], source=str(self))


async def load_configuration(api: ApiClient, namespace: str, name: str, key: str) -> Configuration:
    """Read the configuration from a ConfigMap; ``ConfigError`` names the ConfigMap, field and value."""
    source = ConfigSource(namespace, name, key)
    try:
        data = await core.config_map_data(api, namespace, name)
    except ApiError as e:
        raise ConfigError(str(source), [f"cannot read the ConfigMap: HTTP {e.status} {e.reason}"]) from None
    return source.parse(data)


class StartupError(Exception):
    """The process cannot start as configured: one line naming what and why, no traceback."""


async def check_kinds(api: ApiClient, config: Configuration) -> None:
    """Refuse a configured kind the cluster serves under another spelling (kinds are case-sensitive): left alone,
    it would be looked for forever and never dispatched. A kind not served at all is fine: its CRD may come later.
    Discovery that gets no answer raises (``TRANSIENT``): the spelling is then not known either way."""
    for gvk in config.multi_kueue.gvks:
        try:
            await discover_resource(api, gvk)
        except KindMisspelt as e:
            raise StartupError(f"multiKueue.externalFrameworks: {e}") from None
        except (KindUnavailable, ApiError):
            continue


class ConfigReloads:
    """The configuration in force (``current``) and, from ``next_valid``, each valid change to it.

    The ConfigMap's informer only drops the newest ConfigMap into a one-slot mailbox: a burst of edits is judged
    once, by its last state, and a slow kind check never holds the watch up.
    """

    def __init__(
        self,
        api: ApiClient,
        source: ConfigSource,
        current: Configuration,
        *,
        metrics: Metrics,
        check: KindCheck | None = None,
    ) -> None:
        self.api = api
        self.source = source
        self.current = current
        self.metrics = metrics
        self.check = check  # the manager's kind spelling check; None for the worker role
        self.config_map: Object | None = None  # as last seen: where Events about the configuration go
        self._latest: Object | None = None
        self._arrived = anyio.Event()
        self._seen: str | None = None  # the key's last text judged: relists and other keys change nothing

    async def watch(self) -> None:
        """Follow the ConfigMap for as long as the process runs."""
        source = core.config_map_source(self.api, self.source.namespace, self.source.name, description=str(self))
        await Informer(source, on_event=self.on_event).run()

    def __str__(self) -> str:
        return str(self.source)

    def on_event(self, kind: str, config_map: Object) -> None:
        if kind == DELETED:
            log.warning("configuration ConfigMap deleted; keeping the running configuration", source=str(self))
            return
        self.config_map = config_map
        self._latest = config_map
        self._arrived.set()

    def offer_again(self) -> None:
        """Judge the ConfigMap as last seen again (a change whose judgement was cancelled); one judged is ignored."""
        if self.config_map is not None and self._latest is None:
            self._latest = self.config_map
            self._arrived.set()

    async def next_valid(self) -> Configuration:
        """Wait for a change that parses, passes the kind check and differs from ``current``; it becomes current."""
        while True:
            await self._arrived.wait()
            self._arrived = anyio.Event()
            config_map, self._latest = self._latest, None
            if config_map is None:
                continue
            try:
                config = await self._judge(config_map)
            except TRANSIENT as e:  # not judged: neither applied nor refused
                log.warning("cannot check the changed configuration's kinds now; judged again shortly",
                            source=str(self), error=describe(e), seconds=RECHECK_SECONDS)  # fmt: skip
                await anyio.sleep(RECHECK_SECONDS)
                if self._latest is None:  # a newer edit, if any, is judged instead
                    self._latest = config_map
                self._arrived.set()
                continue
            if config is not None:
                return config

    async def _judge(self, config_map: Object) -> Configuration | None:
        data = config_map.get("data") or {}
        text = data.get(self.source.key)
        if text == self._seen:
            return None
        try:
            config = self.source.parse(data)
            if config != self.current and self.check is not None:
                await self.check(config)
        except (ConfigError, StartupError) as e:
            self._seen = text
            await self.refuse(str(e))
            return None
        self._seen = text
        self.metrics.config_valid.set(1)
        if config == self.current:
            return None
        self.metrics.config_reloads.labels("applied").inc()
        self.current = config
        return config

    async def refuse(self, problem: str) -> None:
        """The one refusal: counted, flagged, logged, and told on the ConfigMap; the running configuration stays."""
        self.metrics.config_reloads.labels("invalid").inc()
        self.metrics.config_valid.set(0)
        log.error("invalid configuration ignored; keeping the running one", error=problem)
        await self.warn("InvalidConfiguration", f"{problem} (the running configuration is kept)")

    async def warn(self, reason: str, message: str) -> None:
        """A Warning Event on the configuration's ConfigMap, where whoever edits it looks."""
        if self.config_map is None:
            with contextlib.suppress(KubeError):
                self.config_map = await core.read_config_map(self.api, self.source.namespace, self.source.name)
        if self.config_map is None:
            return
        obj = {**self.config_map, "apiVersion": "v1", "kind": "ConfigMap"}
        await events.record(self.api, obj, type_="Warning", reason=reason, message=message,
                            component=self.current.dispatcher.controller_name)  # fmt: skip
