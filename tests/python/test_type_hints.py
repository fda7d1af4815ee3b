"""The public Python API carries type hints: every parameter and the return
of each public function and method of yr.datasystem, datasystem and
omni_connectors is annotated, and the annotations resolve
(typing.get_type_hints), so type checkers and IDEs see the signatures."""

import inspect
import typing

import pytest

from omni_connectors import base, factory, serializer, yuanrong_connector
from yr.datasystem import kv_client, object_client, util

PUBLIC_CLASSES = [
    kv_client.KVClient,
    kv_client.SetParam,
    kv_client.ReadOnlyBuffer,
    object_client.ObjectClient,
    object_client.Buffer,
    util.Status,
    util.Validator,
    util.Context,
    base.OmniConnectorBase,
    factory.OmniConnectorFactory,
    yuanrong_connector.YuanrongConnector,
]

PUBLIC_FUNCTIONS = [
    serializer.serialize,
    serializer.deserialize,
    serializer.serialize_chunks,
    serializer.raw_frame,
    serializer.encode_ndarray,
    serializer.encode_tensor,
    serializer.decode_ndarray,
    serializer.decode_tensor,
]


def public_callables():
    for f in PUBLIC_FUNCTIONS:
        yield f.__qualname__, f
    for cls in PUBLIC_CLASSES:
        for name, member in vars(cls).items():
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            elif isinstance(member, property):
                member = member.fget
            if not inspect.isfunction(member):
                continue
            # Yuanrong's CamelCase aliases call the annotated method.
            if name[:1].isupper():
                continue
            yield "%s.%s" % (cls.__name__, name), member


@pytest.mark.parametrize("qualname,func", list(public_callables()))
def test_annotated(qualname, func):
    hints = typing.get_type_hints(func)
    sig = inspect.signature(func)
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        assert p.name in hints, "%s: parameter %s has no type hint" % (qualname, p.name)
    assert "return" in hints, "%s: no return type" % qualname
