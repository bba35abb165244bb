"""Hook implementations of the MES publisher plugin (registered as ``publisher``).

The publisher needs the store (it reads the change streams there) and the binding it
publishes on; without either it contributes nothing. Its service has the role ``publisher``:
``gateway run --role publisher`` runs it alone, the default role ``all`` runs it beside
everything else (a lease keeps one instance active however many run it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl
from gateway.settings import Settings
from gateway.transport import Service
from gateway_publisher.documents import DocumentSourceFactory
from gateway_publisher.service import PublisherService
from gateway_publisher.settings import PublisherSettings, effective_topic_prefix

if TYPE_CHECKING:
    from gateway.phases import ServicePhase

log = logging.getLogger(__name__)


class PublisherPlugin:
    """The plugin's hooks; the default plugin is an instance without a document source.

    Build another one with ``documents`` (and block the default ``publisher`` plugin) to give
    the publisher a way to read order and result documents that change records do not carry.
    """

    def __init__(self, documents: DocumentSourceFactory | None = None) -> None:
        self.documents = documents
        self.services: list[PublisherService] = []  # what this plugin registered, newest last

    @hookimpl
    def gateway_add_settings(self, register: Callable[[str, type[Any]], None]) -> None:
        register("publisher", PublisherSettings)

    @hookimpl
    def gateway_register_services(
        self, register: Callable[[Service], None], settings: Settings, gateway: ServicePhase
    ) -> None:
        publisher = settings.get(PublisherSettings)
        if gateway.store is None or publisher.binding not in gateway.bindings:
            log.info("MES publisher off: it needs a store and the %r binding", publisher.binding)
            return
        service = PublisherService(
            publisher, effective_topic_prefix(publisher, settings), documents=self.documents
        )
        self.services.append(service)
        register(service)

    @hookimpl
    def gateway_transport_connected(
        self, binding: str, session_present: bool, reconnect: bool
    ) -> None:
        """A broker that restarted may have lost the retained topics: publish them again."""
        if not (reconnect or not session_present):
            return
        why = "reconnected to the broker" if reconnect else "the broker had no session"
        for service in self.services:
            if service.settings.binding == binding:
                service.request_heal(why)


_default = PublisherPlugin()
gateway_add_settings = _default.gateway_add_settings
gateway_register_services = _default.gateway_register_services
gateway_transport_connected = _default.gateway_transport_connected
