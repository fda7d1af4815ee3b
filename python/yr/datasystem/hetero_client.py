"""Yuanrong's heterogeneous client (``yr.datasystem.hetero_client``), without a device.

Yuanrong's ``HeteroClient`` moves data between the worker's host memory and
accelerator (NPU) memory. This datasystem manages no device memory, so the
class exists (``DsClient`` makes one, as Yuanrong's does) and checks its
constructor's arguments, ``init()`` succeeds, and every data operation raises
``NotImplementedError`` (a subclass of ``RuntimeError``) naming what is
missing. Use ``KVClient`` for host-memory data.
"""

from typing import Any

from yr.datasystem.util import Validator

__all__ = ["HeteroClient"]

_MISSING = (
    "HeteroClient.%s is not supported: this datasystem manages no device (NPU) memory, "
    "which the heterogeneous client needs; use KVClient for host memory"
)

_OPERATIONS = (
    "mget_h2d", "mget_h2d_from_multi_buffers", "pre_register_device_memory", "mset_d2h",
    "mset_d2h_from_multi_buffers", "async_mset_d2h", "async_mget_h2d", "delete", "dev_publish",
    "dev_subscribe", "dev_mset", "dev_mget", "dev_delete", "async_dev_delete",
    "dev_local_delete", "generate_key", "exist", "batch_is_exist", "get_meta_info",
)


class HeteroClient:
    """Device-memory client: arguments checked, operations not supported (module notes)."""

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
        *args: Any,
        **kwargs: Any
    ) -> None:
        Validator.check_args_types([
            ["host", host, str], ["port", port, int],
            ["connect_timeout_ms", connect_timeout_ms, int], ["token", token, str],
            ["client_public_key", client_public_key, str],
            ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str], ["access_key", access_key, str],
            ["secret_key", secret_key, str], ["tenant_id", tenant_id, str],
            ["enable_cross_node_connection", enable_cross_node_connection, bool],
            ["req_timeout_ms", req_timeout_ms, int],
        ])

    def init(self) -> None:
        """Nothing to connect: there is no device to open."""


def _unsupported(name):
    def op(self, *args, **kwargs):
        raise NotImplementedError(_MISSING % name)

    op.__name__ = name
    op.__doc__ = "Not supported here (see the module's notes)."
    return op


for _name in _OPERATIONS:
    setattr(HeteroClient, _name, _unsupported(_name))
del _name
