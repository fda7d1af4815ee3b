"""OmniConnectors over the datasystem (vLLM-Omni's OmniConnectorBase contract).

    from omni_connectors import YuanrongConnector
    with YuanrongConnector({"host": "127.0.0.1", "port": 31501}) as conn:
        ok, size, _ = conn.put("0", "1", "req-1", {"hidden": array})
        obj, size = conn.get("0", "1", "req-1")
"""

from .base import OmniConnectorBase
from .factory import ConnectorSpec, OmniConnectorFactory
from .serializer import OmniSerializer
from .yuanrong_connector import YuanrongConnector

__all__ = [
    "OmniConnectorBase",
    "OmniConnectorFactory",
    "ConnectorSpec",
    "OmniSerializer",
    "YuanrongConnector",
]
