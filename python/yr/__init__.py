"""The ``yr`` namespace: ``yr.datasystem`` is the datasystem client."""
