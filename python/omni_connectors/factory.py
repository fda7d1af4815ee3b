"""OmniConnectorFactory: connectors registered by name, built from a spec."""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union


@dataclass
class ConnectorSpec:
    """A connector's name and its ``extra`` config (vLLM-Omni's ConnectorSpec)."""

    name: str
    extra: Dict[str, Any] = field(default_factory=dict)


class OmniConnectorFactory:
    _registry: Dict[str, Callable[[dict], Any]] = {}

    @classmethod
    def register_connector(cls, name: str, constructor: Callable[[dict], Any]) -> None:
        if name in cls._registry:
            raise ValueError("connector %r is already registered" % name)
        cls._registry[name] = constructor

    @classmethod
    def registered(cls) -> List[str]:
        return sorted(cls._registry)

    @classmethod
    def create_connector(
        cls, spec: Union[ConnectorSpec, str], config: Optional[dict] = None
    ) -> Any:
        """Builds a connector from a ConnectorSpec, or from a name and config."""
        if isinstance(spec, ConnectorSpec):
            name, config = spec.name, spec.extra
        else:
            name = spec
        if name not in cls._registry:
            raise ValueError(
                "unknown connector %r; registered: %s" % (name, ", ".join(cls.registered()))
            )
        return cls._registry[name](dict(config or {}))


def _yuanrong(config):
    from .yuanrong_connector import YuanrongConnector

    return YuanrongConnector(config)


OmniConnectorFactory.register_connector("YuanrongConnector", _yuanrong)
