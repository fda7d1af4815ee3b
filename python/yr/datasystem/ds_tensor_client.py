"""Yuanrong's tensor client (``yr.datasystem.ds_tensor_client``): torch tensors
in and out of the datasystem, over ``HeteroClient``.

    from yr.datasystem import DsTensorClient, CopyRange
    client = DsTensorClient("127.0.0.1", 31501, device_id=0)
    client.init()
    client.mset_d2h(["k0", "k1"], [t0, t1])
    failed = client.mget_h2d(["k0", "k1"], [out0, out1])

Each tensor is one blob: its first byte (``data_ptr()``) and its size
(``numel() * element_size()``), on device ``device_id``; so the tensors must be
contiguous, and a get's tensor no larger than the value (a smaller one takes
the value's first bytes). Which tensors are
device tensors depends on the device backend (``DS_DEVICE_BACKEND``, see
``hetero_client``):

* ``cuda``: CUDA tensors on ``cuda:<device_id>`` (Yuanrong also takes NPU and
  MindSpore Ascend tensors, which no backend here reaches);
* ``host``: CPU tensors, host memory standing in for device memory.

Importing this module imports torch (``yr.datasystem`` itself does not: its
names are resolved on first use). Errors from the datasystem are
``RuntimeError(status.to_string())`` as in ``HeteroClient``.
"""

from dataclasses import dataclass
from typing import List

from yr.datasystem.hetero_client import Blob, DeviceBlobList, Future, HeteroClient
from yr.datasystem.kv_client import SetParam
from yr.datasystem.util import Validator as validator

try:
    from torch import Tensor
except ModuleNotFoundError as e:
    raise ModuleNotFoundError(
        "DsTensorClient requires either torch or mindspore to be installed. "
        "Please install the required package."
    ) from e

__all__ = ["CopyRange", "DsTensorClient"]

# Device types each backend can copy to and from; Yuanrong's own list is
# npu/Ascend/cuda, for which its message is kept.
_YUANRONG_DEVICE_TYPES = ("Ascend", "npu", "cuda")
_BACKEND_DEVICE_TYPES = {"cuda": ("cuda",), "host": ("cpu",)}

_backend_name = None


def _device_backend():
    """The process's device backend ("host" or "cuda"), chosen on first use.
    Raises RuntimeError naming DS_DEVICE_BACKEND when there is none."""
    global _backend_name
    if _backend_name is None:
        from yr.datasystem.lib import libds_client_py as native

        _backend_name = native.device_backend_name()
    return _backend_name


@dataclass
class CopyRange:
    """A piece of a key's value to copy into a tensor (all in bytes).

    Attributes:
        src_offset (int): where the piece starts in the value.
        dst_offset (int): where it goes in the destination tensor.
        length (int): its length.
    """

    src_offset: int
    dst_offset: int
    length: int


def _device_type(tensor) -> str:
    device = getattr(tensor, "device", None)
    if isinstance(device, str):
        # MindSpore without msadapter: its tensors' device is a string.
        raise AttributeError(
            "tensor.device is a string, 'str' object has no attribute 'type'. This usually "
            "indicates that MindSpore is being used without msadapter, or there's a version "
            "mismatch.\n Solutions:\n 1. Install msadapter for proper tensor operations: \n"
            "   pip install msadapter\n 2. Ensure MindSpore and msadapter version compatibility.\n"
        )
    return device.type


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _bytes_after(tensor, ptr: int) -> int:
    """How many bytes of the tensor's storage lie from ptr on (the tensor's
    own size where the storage is not visible, as for MindSpore's)."""
    for name in ("untyped_storage", "storage"):
        if hasattr(tensor, name):
            try:
                storage = getattr(tensor, name)()
                return storage.data_ptr() + storage.nbytes() - ptr
            except (AttributeError, RuntimeError, TypeError):
                continue
    return _nbytes(tensor)


class DsTensorClient:
    """Tensor cache client: tensors to and from the datasystem (D2H / H2D) and
    between devices (D2D) under keys.

    Args:
        host (str), port (int): the worker.
        device_id (int): the device the tensors are on (``cuda:<device_id>``;
            0 on the host backend).
        connect_timeout_ms (int): connect timeout, default 9000.
        client_public_key, client_private_key, server_public_key (str): curve
            keys, type-checked only, as by HeteroClient.
        req_timeout_ms (int): request timeout; <= 0: connect_timeout_ms.
        enable_remote_h2d (bool): a key held by another worker is pulled and
            copied to the device.

    Raises:
        TypeError: an argument of the wrong type.
    """

    def __init__(
        self,
        host: str,
        port: int,
        device_id: int,
        connect_timeout_ms: int = 9000,
        client_public_key: str = "",
        client_private_key: str = "",
        server_public_key: str = "",
        req_timeout_ms: int = 0,
        enable_remote_h2d: bool = False,
    ) -> None:
        validator.check_args_types([
            ["host", host, str],
            ["port", port, int],
            ["device_id", device_id, int],
            ["connect_timeout_ms", connect_timeout_ms, int],
            ["client_public_key", client_public_key, str],
            ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str],
            ["req_timeout_ms", req_timeout_ms, int],
            ["enable_remote_h2d", enable_remote_h2d, bool],
        ])
        self._hetero_client = HeteroClient(
            host=host,
            port=port,
            connect_timeout_ms=connect_timeout_ms,
            client_public_key=client_public_key,
            client_private_key=client_private_key,
            server_public_key=server_public_key,
            req_timeout_ms=req_timeout_ms,
            enable_remote_h2d=enable_remote_h2d,
        )
        self._device_id = device_id

    # -- tensor checks and conversion ------------------------------------------

    @staticmethod
    def _is_ms_tensor(tensor) -> bool:
        return _device_type(tensor) == "Ascend"

    def _check_tensor_device_type(self, tensor) -> None:
        """The tensor must be where the device backend copies: ValueError
        otherwise (Yuanrong's message for a tensor on none of its devices)."""
        device_type = _device_type(tensor)
        backend = _device_backend()
        wanted = _BACKEND_DEVICE_TYPES.get(backend, ())
        if device_type not in wanted:
            if device_type not in _YUANRONG_DEVICE_TYPES and backend == "cuda":
                raise ValueError(
                    f"{device_type} tensor, not a supported device tensor "
                    "(expected npu/Ascend/cuda)"
                )
            raise ValueError(
                f"{device_type} tensor, not a supported device tensor on the {backend} device "
                f"backend (expected {'/'.join(wanted)}; DS_DEVICE_BACKEND selects the backend)"
            )
        index = getattr(tensor.device, "index", None)
        if device_type == "cuda" and index is not None and index != self._device_id:
            # The copy runs on device_id's context: a tensor elsewhere is refused.
            raise ValueError(
                f"cuda:{index} tensor, but this client's device_id is {self._device_id}"
            )

    @staticmethod
    def _check_tensors_is_contiguous(tensors: List[Tensor]) -> None:
        """TypeError for a tensor whose memory is not contiguous."""
        for tensor in tensors:
            if not tensor.is_contiguous():
                raise TypeError(
                    "Tensor memory is not contiguous. "
                    "Possible solutions:\n"
                    "1. Call tensor.contiguous() to create a contiguous copy\n"
                    "2. Check if the tensor was created with non-contiguous operations "
                    "(e.g. transpose, narrow, expand)\n"
                    "3. Verify tensor creation parameters (order='C' for C-contiguous)"
                )

    @staticmethod
    def _get_tensor_data_ptr(tensor) -> int:
        """The tensor's first byte; RuntimeError for one with no storage."""
        data_ptr = tensor.data_ptr()
        if data_ptr == 0:
            raise RuntimeError(
                "The input tensor has no valid data storage (data_ptr is null). "
                "Please ensure the tensor is properly initialized and not empty."
            )
        if DsTensorClient._is_ms_tensor(tensor):
            # MindSpore's data_ptr is its storage's start, not the view's.
            return data_ptr + tensor.storage_offset() * tensor.element_size()
        return data_ptr

    def _tensor_2_bloblist(self, tensor) -> DeviceBlobList:
        """One tensor as a DeviceBlobList of one blob on device_id."""
        self._check_tensor_device_type(tensor)
        blob = Blob(self._get_tensor_data_ptr(tensor), _nbytes(tensor))
        return DeviceBlobList(self._device_id, [blob])

    def _bloblists(self, tensors: list) -> list:
        self._check_tensors_is_contiguous(tensors)
        return [self._tensor_2_bloblist(tensor) for tensor in tensors]

    # -- lifecycle -------------------------------------------------------------

    def init(self) -> None:
        """Connects to the worker; RuntimeError when it cannot."""
        self._hetero_client.init()

    def close(self) -> None:
        """Closes the connection (waiting for async calls in flight); idempotent."""
        self._hetero_client.close()

    # -- device <-> host ---------------------------------------------------------

    def mset_d2h(self, keys: List[str], tensors: List[Tensor],
                 set_param: SetParam = SetParam()) -> None:
        """Writes each tensor's bytes to the host (the worker's shared memory)
        under its key. At most 10,000 keys.

        Raises:
            RuntimeError: the write failed.
            TypeError: an argument of the wrong type, or a non-contiguous tensor.
            ValueError: a tensor the device backend does not reach.
        """
        validator.check_args_types([["keys", keys, list], ["tensors", tensors, list]])
        return self._hetero_client.mset_d2h(keys, self._bloblists(tensors), set_param)

    def mget_h2d(self, keys: List[str], tensors: List[Tensor], sub_timeout_ms: int = 0) -> list:
        """Copies each key's value into its tensor, waiting up to
        sub_timeout_ms for keys not yet there.

        Returns:
            list: the keys that failed (missing, or of another size than their tensor).

        Raises:
            RuntimeError: every key failed.
            TypeError, ValueError: as mset_d2h.
        """
        validator.check_args_types([
            ["keys", keys, list], ["tensors", tensors, list],
            ["sub_timeout_ms", sub_timeout_ms, int],
        ])
        return self._hetero_client.mget_h2d(keys, self._bloblists(tensors), sub_timeout_ms)

    def async_mset_d2h(self, keys: List[str], tensors: List[Tensor],
                       set_param: SetParam = SetParam()) -> Future:
        """mset_d2h in the background; ``get()`` of the Future returns the failed keys."""
        validator.check_args_types([["keys", keys, list], ["tensors", tensors, list]])
        return self._hetero_client.async_mset_d2h(keys, self._bloblists(tensors), set_param)

    def async_mget_h2d(self, keys: List[str], tensors: List[Tensor],
                       sub_timeout_ms: int = 0) -> Future:
        """mget_h2d in the background; ``get()`` of the Future returns the failed keys."""
        validator.check_args_types([
            ["keys", keys, list], ["tensors", tensors, list],
            ["sub_timeout_ms", sub_timeout_ms, int],
        ])
        return self._hetero_client.async_mget_h2d(keys, self._bloblists(tensors), sub_timeout_ms)

    def delete(self, keys: list = None) -> list:
        """Deletes keys written by mset_d2h (a missing key counts as deleted);
        returns those that failed."""
        validator.check_args_types([["keys", keys, list]])
        return self._hetero_client.delete(keys)

    def exist(self, keys: List[str]) -> List[bool]:
        """Whether each key exists. At most 100,000 keys."""
        validator.check_args_types([["keys", keys, list]])
        return self._hetero_client.exist(keys)

    # -- device to device ----------------------------------------------------------

    def dev_mset(self, keys: List[str], tensors: List[Tensor]) -> list:
        """Caches the tensors under keys for dev_mget (by this or another
        client); they stay until dev_delete / dev_local_delete. Returns the
        failed keys."""
        validator.check_args_types([["keys", keys, list], ["tensors", tensors, list]])
        return self._hetero_client.dev_mset(keys, self._bloblists(tensors))

    def dev_mget(self, keys: List[str], tensors: List[Tensor], sub_timeout_ms: int = 0) -> list:
        """Copies keys set by dev_mset into the tensors, waiting up to
        sub_timeout_ms for them. Returns the failed keys; RuntimeError when
        all failed."""
        validator.check_args_types([
            ["keys", keys, list], ["tensors", tensors, list],
            ["sub_timeout_ms", sub_timeout_ms, int],
        ])
        return self._hetero_client.dev_mget(keys, self._bloblists(tensors), sub_timeout_ms)

    def dev_mget_into_tensor(self, keys: List[str], tensor: Tensor, copy_ranges: List[CopyRange],
                             sub_timeout_ms: int = 60000) -> list:
        """Copies a piece of each key's value (``copy_ranges[i]``: source
        offset, offset in the tensor, length, in bytes) into one tensor.

        Returns:
            list: the keys that failed.

        Raises:
            RuntimeError: keys and copy_ranges differ in length; every key failed.
            TypeError: an argument of the wrong type.
            ValueError: a range outside the tensor; a tensor the backend does not reach.
        """
        validator.check_args_types([
            ["keys", keys, list],
            ["tensors", tensor, Tensor],
            ["copy_ranges", copy_ranges, list],
            ["sub_timeout_ms", sub_timeout_ms, int],
        ])
        if len(keys) != len(copy_ranges):
            raise RuntimeError(
                "The length of keys and copy_ranges do not match, keys:{}, copy_ranges:{}".format(
                    len(keys), len(copy_ranges)))
        self._check_tensor_device_type(tensor)
        start_ptr = self._get_tensor_data_ptr(tensor)
        # The copies write device memory directly: a range past the tensor's
        # end would write over whatever lies there, so it is refused.
        limit = _bytes_after(tensor, start_ptr)
        blob_lists = []
        for i, copy_range in enumerate(copy_ranges):
            # Any object with the three fields will do, as in Yuanrong.
            if not all(hasattr(copy_range, n) for n in ("src_offset", "dst_offset", "length")):
                raise TypeError("copy_ranges[%d] must be a CopyRange, not %s"
                                % (i, type(copy_range).__name__))
            for name in ("src_offset", "dst_offset", "length"):
                validator.check_args_types(
                    [["copy_ranges[%d].%s" % (i, name), getattr(copy_range, name), int]])
            if copy_range.src_offset < 0 or copy_range.dst_offset < 0 or copy_range.length < 0 \
                    or copy_range.dst_offset + copy_range.length > limit:
                raise ValueError(
                    "copy_ranges[%d] (src_offset %d, dst_offset %d, length %d) does not fit in "
                    "the tensor's %d bytes" % (i, copy_range.src_offset, copy_range.dst_offset,
                                               copy_range.length, limit))
            blob = Blob(start_ptr + copy_range.dst_offset, copy_range.length)
            blob_lists.append(DeviceBlobList(self._device_id, [blob], copy_range.src_offset))
        return self._hetero_client.dev_mget(keys, blob_lists, sub_timeout_ms)

    def dev_delete(self, keys: list = None) -> list:
        """Deletes keys set by dev_mset; returns those that failed."""
        validator.check_args_types([["keys", keys, list]])
        return self._hetero_client.dev_delete(keys)

    def async_dev_delete(self, keys: list = None) -> Future:
        """dev_delete in the background; ``get()`` returns the failed keys and
        raises RuntimeError when all failed."""
        validator.check_args_types([["keys", keys, list]])
        return self._hetero_client.async_dev_delete(keys)

    def dev_local_delete(self, keys: list) -> list:
        """Deletes this client's copies of keys set by dev_mset; returns the
        failed keys."""
        validator.check_args_types([["keys", keys, list]])
        return self._hetero_client.dev_local_delete(keys)

    def dev_send(self, keys: List[str], tensors: List[Tensor]) -> List[Future]:
        """Publishes the tensors under keys for one dev_recv; one Future per key."""
        validator.check_args_types([["keys", keys, list], ["tensors", tensors, list]])
        return self._hetero_client.dev_publish(keys, self._bloblists(tensors))

    def dev_recv(self, keys: List[str], tensors: List[Tensor]) -> List[Future]:
        """Receives keys published by dev_send into the tensors; the objects
        are deleted once received. One Future per key."""
        validator.check_args_types([["keys", keys, list], ["tensors", tensors, list]])
        return self._hetero_client.dev_subscribe(keys, self._bloblists(tensors))
