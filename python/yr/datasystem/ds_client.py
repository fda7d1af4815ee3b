"""One client for each of the datasystem's interfaces (Yuanrong's ``yr.datasystem.ds_client``).

    from yr.datasystem.ds_client import DsClient
    client = DsClient("127.0.0.1", 31501)
    client.init()
    client.kv().set("key", "value")
    client.object().g_increase_ref(["obj"])

``DsClient`` holds a ``KVClient``, an ``ObjectClient`` and a ``HeteroClient``
(device memory: see ``yr.datasystem.hetero_client``) connected to the same
worker, made with the same arguments.
"""

from typing import Any

from yr.datasystem.hetero_client import HeteroClient
from yr.datasystem.kv_client import KVClient
from yr.datasystem.object_client import ObjectClient
from yr.datasystem.service_discovery import CoordinatorServiceDiscovery, ServiceDiscovery
from yr.datasystem.util import Validator

__all__ = ["DsClient"]


class DsClient:
    """Datasystem client management: ``kv()``, ``object()`` and ``hetero()``.

    Args: as Yuanrong's ``DsClient`` (host, port, connect_timeout_ms, token,
    client_public_key, client_private_key, server_public_key, access_key,
    secret_key, tenant_id, enable_cross_node_connection, req_timeout_ms,
    service_discovery). host "" and port 0 fall back to the environment
    (DATASYSTEM_HOST, DATASYSTEM_PORT), as for ``KVClient``. service_discovery:
    a ``ServiceDiscovery`` / ``CoordinatorServiceDiscovery`` (``init()``ed),
    given to the KV and object clients, which then fail over through it
    with enable_cross_node_connection; or any object with
    ``select_worker() -> (_, host, port, _)``, asked once. When given, host
    and port are ignored.

    Raises:
        TypeError: an argument of the wrong type.
        RuntimeError: only one of host and port given.
    """

    def __init__(
        self,
        host: str = "",
        port: int = 0,
        connect_timeout_ms: int = 9000,
        token: str = "",
        client_public_key: str = "",
        client_private_key: str = "",
        server_public_key: str = "",
        access_key: str = "",
        secret_key: str = "",
        tenant_id: str = "",
        enable_cross_node_connection: bool = False,
        req_timeout_ms: int = 0,
        service_discovery: Any = None,
    ) -> None:
        args = [
            ["connect_timeout_ms", connect_timeout_ms, int],
            ["token", token, str],
            ["client_public_key", client_public_key, str],
            ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str],
            ["access_key", access_key, str],
            ["secret_key", secret_key, str],
            ["tenant_id", tenant_id, str],
            ["enable_cross_node_connection", enable_cross_node_connection, bool],
            ["req_timeout_ms", req_timeout_ms, int],
        ]
        if service_discovery is None:
            args[0:0] = [["host", host, str], ["port", port, int]]
        Validator.check_args_types(args)
        native = isinstance(service_discovery, (ServiceDiscovery, CoordinatorServiceDiscovery))
        if service_discovery is not None:
            if host or port:
                import warnings

                warnings.warn("host and port are ignored when service_discovery is provided")
            _, host, port, _ = service_discovery.select_worker()
        elif bool(host) != (port > 0):
            raise RuntimeError("host and port must be provided together, or use service_discovery")
        common = (host, port, connect_timeout_ms, token, client_public_key, client_private_key,
                  server_public_key, access_key, secret_key, tenant_id)
        self._hetero_client = HeteroClient(*common, enable_cross_node_connection, req_timeout_ms)
        if native:
            # The KV and object clients take the discovery itself: they
            # connect where it says and, with enable_cross_node_connection,
            # fail over through it.
            blank = ("", 0) + common[2:]
            self._kv_client = KVClient(*blank, enable_cross_node_connection, req_timeout_ms,
                                       service_discovery=service_discovery)
            self._object_client = ObjectClient(
                *blank, req_timeout_ms, service_discovery=service_discovery,
                enable_cross_node_connection=enable_cross_node_connection)
        else:
            self._kv_client = KVClient(*common, enable_cross_node_connection, req_timeout_ms)
            self._object_client = ObjectClient(*common, req_timeout_ms)

    def init(self) -> None:
        """Connects the clients to the worker. Raises RuntimeError when it cannot."""
        self._kv_client.init()
        self._hetero_client.init()
        self._object_client.init()

    def kv(self) -> KVClient:
        """The KV client."""
        return self._kv_client

    def hetero(self) -> HeteroClient:
        """The heterogeneous (device memory) client."""
        return self._hetero_client

    def object(self) -> ObjectClient:
        """The object cache client."""
        return self._object_client

    def close(self) -> None:
        """Closes the clients' connections; idempotent."""
        self._kv_client.close()
        self._hetero_client.close()
        self._object_client.close()
