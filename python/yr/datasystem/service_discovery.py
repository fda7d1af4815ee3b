"""Service discovery (Yuanrong's ``yr.datasystem.service_discovery``).

A discovery finds the ready workers of a cluster in etcd (every worker with
``--etcd_address`` registers ``/datasystem/<cluster_name>/cluster/<host:port>``)
and picks one per its affinity policy. Give it to ``KVClient`` (with
``enable_cross_node_connection=True``) and the client, when its worker stops
answering, carries on with another worker the discovery lists.

    from yr.datasystem import ServiceDiscovery, ServiceDiscoveryOptions
    options = ServiceDiscoveryOptions()
    options.etcd_address = "127.0.0.1:2379"
    options.cluster_name = "default"
    sd = ServiceDiscovery(options)
    sd.init()
    status, ip, port, same_node = sd.select_worker()

Host affinity: workers started with ``--host_id_env_name VAR`` publish the
value of ``$VAR``; a discovery with ``host_id_env_name = "VAR"`` reads its
own ``$VAR`` and counts workers with the same value as on its node.
Not supported here: TLS to etcd (``etcd_ca``, ``etcd_cert``, ``etcd_key``,
``etcd_dns_name``: ``init()`` raises saying so). A
``CoordinatorServiceDiscovery``'s ``service_address`` must answer etcd's v3
KV range API (etcd itself, or a proxy in front of it).
"""

from enum import Enum
from typing import List, Tuple

from yr.datasystem.lib import libds_client_py as ds
from yr.datasystem.util import Validator as validator


class ServiceAffinityPolicy(Enum):
    """How ``select_worker`` chooses.

    PREFERRED_SAME_NODE: a worker on this node when one is ready, else any.
    REQUIRED_SAME_NODE: only a worker on this node.
    RANDOM: any ready worker.
    """

    PREFERRED_SAME_NODE = ds.ServiceAffinityPolicy.PREFERRED_SAME_NODE
    REQUIRED_SAME_NODE = ds.ServiceAffinityPolicy.REQUIRED_SAME_NODE
    RANDOM = ds.ServiceAffinityPolicy.RANDOM


class ServiceDiscoveryOptions:
    """Options of ``ServiceDiscovery``.

    etcd_address (str): etcd's "host:port" (several, comma-separated).
    cluster_name (str): the workers' ``--cluster_name``; "" = "default".
    etcd_ca, etcd_cert, etcd_key, etcd_dns_name (str): TLS to etcd; not
        supported (``init()`` raises when any is set).
    username, password (str): etcd authentication.
    token_refresh_interval_sec (int): accepted; a token is asked for on
        every lookup.
    host_id_env_name (str): the variable holding this host's ID.
    affinity_policy (ServiceAffinityPolicy): default PREFERRED_SAME_NODE.
    """

    def __init__(self):
        self.etcd_address = ""
        self.cluster_name = ""
        self.etcd_ca = ""
        self.etcd_cert = ""
        self.etcd_key = ""
        self.etcd_dns_name = ""
        self.username = ""
        self.password = ""
        self.token_refresh_interval_sec = 30
        self.host_id_env_name = ""
        self.affinity_policy = ServiceAffinityPolicy.PREFERRED_SAME_NODE


class CoordinatorServiceDiscoveryOptions:
    """Options of ``CoordinatorServiceDiscovery``: service_address, cluster_name
    ("" = "default"), host_id_env_name, affinity_policy."""

    def __init__(self):
        self.service_address = ""
        self.cluster_name = ""
        self.host_id_env_name = ""
        self.affinity_policy = ServiceAffinityPolicy.PREFERRED_SAME_NODE


def _raise_if_error(status):
    if status.is_error():
        raise RuntimeError(status.to_string())


class _ServiceDiscoveryBase:
    def __init__(self, native_discovery):
        self._sd = native_discovery
        self._initialized = False

    @property
    def native_discovery(self):
        """The native discovery a ``KVClient`` is given."""
        return self._sd

    @property
    def initialized(self) -> bool:
        """Whether ``init()`` has succeeded."""
        return self._initialized

    def init(self) -> None:
        """Resolves the host ID and checks that etcd answers. Raises RuntimeError."""
        _raise_if_error(self._sd.init())
        self._initialized = True

    def select_worker(self) -> Tuple["Status", str, int, bool]:
        """(status, ip, port, same_node) of a ready worker. Raises RuntimeError
        when none can be chosen."""
        status, ip, port, same_node = self._sd.select_worker()
        _raise_if_error(status)
        return status, ip, port, same_node

    def select_same_node_worker(self) -> Tuple["Status", str, int]:
        """(status, ip, port) of a ready worker on this node. Raises RuntimeError."""
        status, ip, port = self._sd.select_same_node_worker()
        _raise_if_error(status)
        return status, ip, port

    def get_all_workers(self) -> Tuple["Status", List[str], List[str]]:
        """(status, same-node "host:port" list, other list). Under RANDOM every
        worker is in the second list; under REQUIRED_SAME_NODE it is empty."""
        status, same, other = self._sd.get_all_workers()
        _raise_if_error(status)
        return status, same, other

    def get_affinity_policy(self) -> ServiceAffinityPolicy:
        return ServiceAffinityPolicy(self._sd.get_affinity_policy())

    def has_host_affinity(self) -> bool:
        """True when the policy is not RANDOM and this host's ID is known."""
        return self._sd.has_host_affinity()


class ServiceDiscovery(_ServiceDiscoveryBase):
    """Discovers the cluster's workers through etcd.

    Raises:
        TypeError: options is not a ServiceDiscoveryOptions.
    """

    def __init__(self, options: ServiceDiscoveryOptions):
        validator.check_args_types([["options", options, ServiceDiscoveryOptions]])
        native = ds.ServiceDiscoveryOptions()
        for name in ("etcd_address", "cluster_name", "etcd_ca", "etcd_cert", "etcd_key",
                     "etcd_dns_name", "username", "password", "token_refresh_interval_sec",
                     "host_id_env_name"):
            setattr(native, name, getattr(options, name))
        native.affinity_policy = options.affinity_policy.value
        super().__init__(ds.ServiceDiscovery(native))


class CoordinatorServiceDiscovery(_ServiceDiscoveryBase):
    """Discovers the cluster's workers through a coordinator's address.

    Raises:
        TypeError: options is not a CoordinatorServiceDiscoveryOptions.
    """

    def __init__(self, options: CoordinatorServiceDiscoveryOptions):
        validator.check_args_types([["options", options, CoordinatorServiceDiscoveryOptions]])
        native = ds.CoordinatorServiceDiscoveryOptions()
        native.service_address = options.service_address
        native.cluster_name = options.cluster_name
        native.host_id_env_name = options.host_id_env_name
        native.affinity_policy = options.affinity_policy.value
        super().__init__(ds.CoordinatorServiceDiscovery(native))
