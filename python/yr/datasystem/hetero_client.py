"""Yuanrong's heterogeneous client (``yr.datasystem.hetero_client``): device memory.

    from yr.datasystem.hetero_client import HeteroClient, Blob, DeviceBlobList
    client = HeteroClient("127.0.0.1", 31501)
    client.init()
    client.mset_d2h(["k"], [DeviceBlobList(0, [Blob(ptr_k, n), Blob(ptr_v, n)])], set_param)
    failed = client.mget_h2d(["k"], [DeviceBlobList(0, [Blob(dst, 2 * n)])], 0)

``mset_d2h`` copies each key's device blobs straight into the worker's
shared memory (one copy, then the key is published); ``mget_h2d`` copies the
value from the worker's shared memory straight into the blobs, split the same
way or another. The device is reached through the backend chosen by the
environment variable ``DS_DEVICE_BACKEND``:

* ``host``: host memory stands in for device memory, a "device pointer" is a
  host address of this process (a numpy array's ``ctypes.data``, say);
* ``cuda``: NVIDIA GPUs through the driver, on each device's primary context
  (the one PyTorch uses), so ``tensor.data_ptr()`` is a device pointer.

Unset: ``cuda`` when a GPU is there; otherwise device operations raise
RuntimeError naming the variable (``exist``, ``delete``, ``get_meta_info``
and ``generate_key`` work either way). Device-to-device calls (``dev_*``)
keep the object in the worker's shared memory between the two devices.

The native objects are in ``yr.datasystem.lib.libds_client_py``, as in
Yuanrong; errors they return are raised here as
``RuntimeError(status.to_string())``.
"""

from typing import List

from yr.datasystem.kv_client import SetParam
from yr.datasystem.lib import libds_client_py as ds
from yr.datasystem.util import Validator as validator

__all__ = ["Blob", "DeviceBlobList", "Future", "HeteroClient", "MetaInfo"]


def _raise_on_error(status):
    if status.is_error():
        raise RuntimeError(status.to_string())


class Future:
    """The result of an async call.

    Args:
        origin_future: the native future.
    """

    def __init__(self, origin_future) -> None:
        self._future = origin_future

    def get(self, timeout_ms: int = 60000) -> list:
        """Waits up to timeout_ms for the call; returns its failed keys.

        Raises:
            RuntimeError: the call failed, or did not finish in time
                (K_FUTURE_TIMEOUT).
        """
        result = self._future.get(timeout_ms)
        failed_keys = []
        if isinstance(result, dict) and "failed_keys" in result:
            failed_keys = result["failed_keys"]
            status = result["status"]
        else:
            status = result
        _raise_on_error(status)
        return failed_keys


class MetaInfo:
    """A key's device meta info: the sizes of its blobs (``blob_size_list``).
    A key set by ``mset_d2h`` is one value, so its list has one entry, the
    value's size."""

    blob_size_list: list

    def __init__(self, blob_size_list) -> None:
        self.blob_size_list = blob_size_list


class Blob:
    """A piece of device memory: ``dev_ptr`` (int) and ``size`` in bytes."""

    def __init__(self, dev_ptr: int, size: int) -> None:
        self.dev_ptr = dev_ptr
        self.size = size

    def to_ds_blob(self):
        """The native Blob."""
        return ds.Blob.build(self.dev_ptr, self.size)

    def set_dev_ptr(self, dev_ptr: int) -> None:
        self.dev_ptr = dev_ptr

    def set_size(self, size: int) -> None:
        self.size = size


class DeviceBlobList:
    """A key's blobs on device ``dev_idx``; a get starts copying the value at
    ``src_offset``."""

    def __init__(self, dev_idx: int, blob_list: list, src_offset: int = 0) -> None:
        self.dev_idx = dev_idx
        self.blob_list = blob_list
        self.src_offset = src_offset

    def to_ds_blob_list(self):
        """The native DeviceBlobList."""
        return ds.DeviceBlobList.build(
            [blob.to_ds_blob() for blob in self.blob_list], self.dev_idx, self.src_offset
        )

    def append_blob(self, blob: Blob) -> None:
        self.blob_list.append(blob)

    def set_dev_idx(self, dev_idx: int) -> None:
        self.dev_idx = dev_idx

    def set_src_offset(self, src_offset: int) -> None:
        self.src_offset = src_offset

    def get_blob_list(self) -> list:
        return self.blob_list


class HeteroClient:
    """The heterogeneous client (Yuanrong's arguments).

    Args:
        host (str), port (int): the worker ("" and 0: env DATASYSTEM_HOST /
            DATASYSTEM_PORT, as for KVClient).
        connect_timeout_ms (int), token (str), req_timeout_ms (int): as KVClient's.
        client_public_key, client_private_key, server_public_key, access_key,
        secret_key, tenant_id, enable_cross_node_connection: accepted and
            checked for type, as by KVClient.
        enable_remote_h2d (bool): a key held by another worker is pulled and
            copied to the device, on or off (the worker pulls remote keys for every
            get; in Yuanrong the flag picks a faster transport, not the answer).

    Raises:
        TypeError: an argument of the wrong type.
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
        enable_remote_h2d: bool = False,
    ) -> None:
        validator.check_args_types([
            ["host", host, str], ["port", port, int],
            ["connect_timeout_ms", connect_timeout_ms, int], ["token", token, str],
            ["client_public_key", client_public_key, str],
            ["client_private_key", client_private_key, str],
            ["server_public_key", server_public_key, str], ["access_key", access_key, str],
            ["secret_key", secret_key, str], ["tenant_id", tenant_id, str],
            ["enable_cross_node_connection", enable_cross_node_connection, bool],
            ["req_timeout_ms", req_timeout_ms, int],
            ["enable_remote_h2d", enable_remote_h2d, bool],
        ])
        self._client = ds.HeteroClient(
            host, port, connect_timeout_ms, token, client_public_key, client_private_key,
            server_public_key, access_key, secret_key, tenant_id, enable_cross_node_connection,
            req_timeout_ms, enable_remote_h2d,
        )

    # -- conversions -------------------------------------------------------

    @staticmethod
    def _native_blob_lists(blob_lists: list) -> list:
        return [bl.to_ds_blob_list() if hasattr(bl, "to_ds_blob_list") else bl
                for bl in blob_lists or []]

    @staticmethod
    def _native_set_param(set_param: SetParam):
        p = ds.SetParam()
        p.write_mode = ds.WriteMode(set_param.write_mode.value)
        p.existence = ds.ExistenceOpt(set_param.existence.value)
        p.ttl_second = set_param.ttl_second
        p.cache_type = ds.CacheType(set_param.cache_type.value)
        return p

    @staticmethod
    def _check_keys_and_blobs(keys, data_blob_list, *extra) -> None:
        validator.check_args_types(
            [["keys", keys, list], ["data_blob_list", data_blob_list, list]] + list(extra)
        )
        if not keys or not data_blob_list:
            raise RuntimeError(r"The input of keys and data_blob_list should not be empty")

    @staticmethod
    def _check_multi_buffers(keys: list, addrs: list, sizes: list) -> None:
        validator.check_args_types([["keys", keys, list], ["addrs", addrs, list],
                                    ["sizes", sizes, list]])
        if not keys or not addrs or not sizes:
            raise ValueError("keys, addrs and sizes must not be empty")
        if not len(keys) == len(addrs) == len(sizes):
            raise ValueError("keys, addrs and sizes must have the same outer size")
        for i, (a, s) in enumerate(zip(addrs, sizes)):
            validator.check_args_types([["addrs[%d]" % i, a, list], ["sizes[%d]" % i, s, list]])
            if not a:
                raise ValueError("addrs[%d] must not be empty" % i)
            if len(a) != len(s):
                raise ValueError("addrs[%d] and sizes[%d] must have the same size" % (i, i))

    # -- lifecycle -----------------------------------------------------------

    def init(self) -> None:
        """Connects to the worker. Raises RuntimeError when it cannot."""
        _raise_on_error(self._client.init())

    def close(self) -> None:
        """Closes the connection (waiting for async calls in flight); idempotent."""
        close = getattr(self._client, "close", None)
        if close is not None:
            close()

    # -- device <-> host -------------------------------------------------------

    def mset_d2h(self, keys: list, data_blob_list: list, set_param: SetParam = SetParam()) -> None:
        """Writes each key's device blobs, joined, to the host (the worker's
        shared memory). At most 10,000 keys.

        Raises:
            RuntimeError: the write failed (the first failed key's status).
            TypeError: an argument of the wrong type.
        """
        self._check_keys_and_blobs(keys, data_blob_list)
        _raise_on_error(self._client.mset_d2h(
            keys, self._native_blob_lists(data_blob_list), self._native_set_param(set_param)))

    def mset_d2h_from_multi_buffers(self, keys: list, addrs: list, sizes: list,
                                    set_param: SetParam = SetParam()) -> None:
        """As mset_d2h, the blobs given as ``addrs[i]`` / ``sizes[i]`` lists on
        the calling thread's current device.

        Raises:
            TypeError, ValueError (shapes), RuntimeError (the write failed).
        """
        self._check_multi_buffers(keys, addrs, sizes)
        _raise_on_error(self._client.mset_d2h_from_multi_buffers(
            keys, addrs, sizes, self._native_set_param(set_param)))

    def mget_h2d(self, keys: list, data_blob_list: list, sub_timeout_ms: int) -> list:
        """Copies each key's value from the host into its device blobs,
        waiting up to sub_timeout_ms for keys not yet there.

        Returns:
            list: the keys that failed (missing, or shorter than their blobs).

        Raises:
            RuntimeError: every key failed.
            TypeError: an argument of the wrong type.
        """
        self._check_keys_and_blobs(keys, data_blob_list, ["sub_timeout_ms", sub_timeout_ms, int])
        status, failed_keys = self._client.mget_h2d(
            keys, self._native_blob_lists(data_blob_list), sub_timeout_ms)
        _raise_on_error(status)
        return failed_keys

    def mget_h2d_from_multi_buffers(self, keys: list, addrs: list, sizes: list,
                                    sub_timeout_ms: int = 0) -> list:
        """As mget_h2d, the blobs given as ``addrs[i]`` / ``sizes[i]`` lists on
        the calling thread's current device. Returns the failed keys."""
        self._check_multi_buffers(keys, addrs, sizes)
        validator.check_args_types([["sub_timeout_ms", sub_timeout_ms, int]])
        status, failed_keys = self._client.mget_h2d_from_multi_buffers(
            keys, addrs, sizes, sub_timeout_ms)
        _raise_on_error(status)
        return failed_keys

    def async_mset_d2h(self, keys: list, data_blob_list: list,
                       set_param: SetParam = SetParam()) -> Future:
        """mset_d2h on a thread of its own; ``get()`` of the Future returns the failed keys."""
        self._check_keys_and_blobs(keys, data_blob_list)
        return Future(self._client.async_mset_d2h(
            keys, self._native_blob_lists(data_blob_list), self._native_set_param(set_param)))

    def async_mget_h2d(self, keys: list, data_blob_list: list, sub_timeout_ms: int) -> Future:
        """mget_h2d on a thread of its own; ``get()`` of the Future returns the failed keys."""
        self._check_keys_and_blobs(keys, data_blob_list, ["sub_timeout_ms", sub_timeout_ms, int])
        return Future(self._client.async_mget_h2d(
            keys, self._native_blob_lists(data_blob_list), sub_timeout_ms))

    def pre_register_device_memory(self, dev_ptrs: list, sizes: list) -> None:
        """Registers device ranges that later copies use, until the client
        closes (cuda: checked against their allocations, host memory
        page-locked). A later blob starting in a registered range must end in
        it. The same range again is kept; an overlapping one is refused.

        Raises:
            RuntimeError: a bad range (the message names it).
        """
        validator.check_args_types([["dev_ptrs", dev_ptrs, list], ["sizes", sizes, list]])
        if not dev_ptrs or not sizes:
            raise RuntimeError(r"The input of dev_ptrs and sizes should not be empty")
        if len(dev_ptrs) != len(sizes):
            raise RuntimeError(r"The size of dev_ptrs and sizes does not match")
        for i, dev_ptr in enumerate(dev_ptrs):
            validator.check_args_types([["dev_ptr", dev_ptr, int]])
            validator.check_param_range("dev_ptrs[{}]".format(i), dev_ptr, 1,
                                        validator.UINT64_MAX_SIZE)
        for i, size in enumerate(sizes):
            validator.check_args_types([["size", size, int]])
            validator.check_param_range("sizes[{}]".format(i), size, 1, validator.UINT64_MAX_SIZE)
        _raise_on_error(self._client.pre_register_device_memory(dev_ptrs, sizes))

    # -- keys --------------------------------------------------------------

    def delete(self, keys: list = None) -> list:
        """Deletes keys; returns those that failed."""
        validator.check_args_types([["keys", keys, list]])
        status, failed_keys = self._client.delete(keys)
        _raise_on_error(status)
        return failed_keys

    def exist(self, keys: list) -> list:
        """Whether each key exists (list of bool)."""
        validator.check_args_types([["keys", keys, list]])
        status, exists = self._client.exist(keys)
        _raise_on_error(status)
        return exists

    def batch_is_exist(self, keys: list) -> list:
        """Whether each key exists, as 1 or 0."""
        validator.check_args_types([["keys", keys, list]])
        status, exists = self._client.batch_is_exist(keys)
        _raise_on_error(status)
        return exists

    def get_meta_info(self, keys: list, is_dev_key: bool):
        """Returns (failed_keys, meta_infos): a MetaInfo per key."""
        validator.check_args_types([["keys", keys, list], ["is_dev_key", is_dev_key, bool]])
        status, res = self._client.get_meta_info(keys, is_dev_key)
        _raise_on_error(status)
        failed_keys, raw = res
        return failed_keys, [MetaInfo(m.blob_size_list) for m in raw]

    def generate_key(self, prefix: str = "") -> str:
        """A new unique key ("" prefix), or prefix itself."""
        validator.check_args_types([["prefix", prefix, str]])
        status, key = self._client.generate_key(prefix)
        _raise_on_error(status)
        return key

    # -- device to device ----------------------------------------------------

    def dev_publish(self, keys: list, data_blob_list: list) -> List[Future]:
        """Publishes device memory under keys for dev_subscribe; one Future per key."""
        self._check_keys_and_blobs(keys, data_blob_list)
        status, futures = self._client.dev_publish(keys, self._native_blob_lists(data_blob_list))
        _raise_on_error(status)
        return [Future(f) for f in futures]

    def dev_subscribe(self, keys: list, data_blob_list: list) -> List[Future]:
        """Receives published keys into device memory; the objects are deleted
        once received. One Future per key."""
        self._check_keys_and_blobs(keys, data_blob_list)
        status, futures = self._client.dev_subscribe(keys, self._native_blob_lists(data_blob_list))
        _raise_on_error(status)
        return [Future(f) for f in futures]

    def dev_transfer_stats(self) -> dict:
        """How this client's dev_subscribe calls received their keys so far
        (not in Yuanrong): ``{"d2d": n, "arena": m}``, keys copied straight
        from the publisher's device memory and keys copied from the worker's
        copy (another machine, a publisher gone, DS_DEVICE_IPC=0)."""
        return self._client.dev_transfer_stats()

    def dev_mset(self, keys: list, data_blob_list: list) -> list:
        """Caches device data under keys for dev_mget; returns the failed keys."""
        self._check_keys_and_blobs(keys, data_blob_list)
        status, failed_keys = self._client.dev_mset(keys, self._native_blob_lists(data_blob_list))
        _raise_on_error(status)
        return failed_keys

    def dev_mget(self, keys: list, data_blob_list: list, sub_timeout_ms: int) -> list:
        """Copies keys set by dev_mset into device memory; returns the failed keys."""
        self._check_keys_and_blobs(keys, data_blob_list, ["sub_timeout_ms", sub_timeout_ms, int])
        status, failed_keys = self._client.dev_mget(
            keys, self._native_blob_lists(data_blob_list), sub_timeout_ms)
        _raise_on_error(status)
        return failed_keys

    def dev_delete(self, keys: list = None) -> list:
        """Deletes dev_mset keys; returns the failed ones."""
        validator.check_args_types([["keys", keys, list]])
        status, failed_keys = self._client.dev_delete(keys)
        _raise_on_error(status)
        return failed_keys

    def async_dev_delete(self, keys: list = None) -> Future:
        """dev_delete on a thread of its own."""
        validator.check_args_types([["keys", keys, list]])
        return Future(self._client.async_dev_delete(keys))

    def dev_local_delete(self, keys: list) -> list:
        """Deletes this client's dev_mset keys; returns the failed ones."""
        validator.check_args_types([["keys", keys, list]])
        if not keys:
            raise RuntimeError(r"The input of keys should not be empty")
        status, failed_keys = self._client.dev_local_delete(keys)
        _raise_on_error(status)
        return failed_keys
