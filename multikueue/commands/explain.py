"""``multikueue explain``: a direct-mode object's placement record (worker, phase, avoided workers, the
``MultiKueuePlacement`` condition's verdicts), read from the manager only; as text, or as the same ``RunStatus``
document ``status -o json`` prints (its workers judged, not read)."""

from __future__ import annotations

from typing import Any

from multikueue.commands.run_document import document
from multikueue.commands.run_text import explain_text
from multikueue.commands.status import gather
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient


async def explain_document(api: ApiClient, gvk: GroupVersionKind, namespace: str, name: str) -> dict[str, Any]:
    """The ``RunStatus`` document from the manager alone (``LookupError`` when the kind is not served there)."""
    return document(await gather(api, gvk, namespace, name, "", read_workers=False))


async def explain(api: ApiClient, gvk: GroupVersionKind, namespace: str, name: str) -> tuple[str, bool]:
    """The placement record of one object, as ``multikueue explain`` prints it; (text, whether it was found)."""
    try:
        found = await explain_document(api, gvk, namespace, name)
    except LookupError as e:
        return str(e), False
    return explain_text(found), found["manager"] is not None
