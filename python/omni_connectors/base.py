"""OmniConnectorBase: vLLM-Omni's connector contract (put / get / cleanup /
health / close), with its default resource-management protocol."""

from abc import ABC, abstractmethod
from typing import Any, Optional, Tuple

# What put returns: (success, serialized size, metadata for the receiver or None).
PutResult = Tuple[bool, int, Optional[dict]]
# What get returns when found: (object, serialized size).
GetResult = Tuple[Any, int]


class OmniConnectorBase(ABC):
    """Base class for all OmniConnectors."""

    # Whether the connector handles raw bytes / arrays / tensors natively,
    # without going through OmniSerializer's generic (copying) path.
    supports_raw_data: bool = False

    @abstractmethod
    def put(self, from_stage: str, to_stage: str, put_key: str, data: Any) -> PutResult:
        """Stores data; returns (success, serialized_size, metadata or None)."""

    @abstractmethod
    def get(
        self, from_stage: str, to_stage: str, get_key: str, metadata: Optional[dict] = None
    ) -> Optional[GetResult]:
        """Returns (object, serialized_size) if found, None otherwise."""

    @abstractmethod
    def cleanup(self, request_id: str) -> None:
        """Releases resources held for a request."""

    @abstractmethod
    def health(self) -> dict:
        """Health status and metrics."""

    @abstractmethod
    def close(self) -> None:
        """Releases the connector's resources; idempotent."""

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "OmniConnectorBase":
        return self

    def __exit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        self.close()

    @staticmethod
    def serialize_obj(obj: Any) -> bytes:
        from .serializer import OmniSerializer

        return OmniSerializer.serialize(obj)

    @staticmethod
    def deserialize_obj(data: Any) -> Any:
        from .serializer import OmniSerializer

        return OmniSerializer.deserialize(data)

    @staticmethod
    def _make_key(key: str, from_stage: str, to_stage: str, separator: str = "@") -> str:
        """Default key format ``{key}@{from_stage}_{to_stage}``."""
        return f"{key}{separator}{from_stage}_{to_stage}"
