"""Private helpers for ``yr.datasystem.object_client.ObjectClient``.

The ObjectClient class calls these with its native client handle (the
``ds_client_t *`` of libdatasystem, as an int or ctypes.c_void_p, e.g. the
``_handle`` of a KVClient it wraps). Each mirrors one Yuanrong ObjectClient
method's contract:

* ``g_increase_ref(handle, object_keys) -> list`` of keys that failed;
* ``g_decrease_ref(handle, object_keys) -> list`` of keys that failed (a key
  without references fails); when a count returns to 0 the object is deleted;
* ``query_global_ref_num(handle, object_key) -> int``, -1 on failure.

Both g_* raise RuntimeError (DsError) when every key failed, TypeError for
arguments of the wrong type, and RuntimeError for an empty list, as
Yuanrong's do. Counts are kept by the worker the client talks to.
"""

from yr.datasystem import _native as _n


def _keys(object_keys):
    if not isinstance(object_keys, list):
        raise TypeError(
            "The input of object_keys has invalid type, valid type: (<class 'list'>,)"
        )
    if not object_keys:
        raise RuntimeError("The input of object_keys list should not be empty")
    for k in object_keys:
        if not isinstance(k, str):
            raise TypeError("object_keys must hold str, not %s" % type(k).__name__)
    return [k.encode("utf-8", "surrogateescape") for k in object_keys]


def _ref(fn_name, handle, object_keys):
    kbs = _keys(object_keys)
    n = len(kbs)
    statuses = (_n.c_status * n)()
    for i in range(n):
        statuses[i] = -1
    rc = getattr(_n.load(), fn_name)(handle, n, _n.keys_array(kbs), statuses)
    failed = [k for k, s in zip(object_keys, statuses) if s != _n.K_OK]
    if rc != _n.K_OK and len(failed) == n:
        _n.check(rc, fn_name)
    return failed


def g_increase_ref(handle, object_keys):
    """Adds a global reference to each key; returns the keys that failed."""
    return _ref("ds_object_g_increase_ref", handle, object_keys)


def g_decrease_ref(handle, object_keys):
    """Drops a global reference from each key (deleting objects whose count
    reaches 0); returns the keys that failed."""
    return _ref("ds_object_g_decrease_ref", handle, object_keys)


def query_global_ref_num(handle, object_key):
    """The key's global reference count, or -1 on failure."""
    if not isinstance(object_key, str):
        raise TypeError("The input of object_key has invalid type, valid type: (<class 'str'>,)")
    count = _n.ctypes.c_uint32()
    rc = _n.load().ds_object_query_global_ref_num(
        handle, object_key.encode("utf-8", "surrogateescape"), count
    )
    return int(count.value) if rc == _n.K_OK else -1
