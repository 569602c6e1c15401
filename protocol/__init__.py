"""The client<->actor contract, written once: actor names and namespaces (``names``), the GCS-KV layout
and its reader (``kv``), Kafka's error classes (``errors``) and the Ray-error mapping (``ray_errors``).

A leaf package: no Ray import at module level (the few Ray calls import it lazily) and no import of
``actors``, ``rafka``, ``serve`` or ``jobs``; ``storage`` may import it.
"""
