"""The client<->actor contract, written once: actor names and namespaces (``names``), the GCS-KV layout
and its reader (``kv``), Kafka's error classes (``errors``), the Ray-error mapping (``ray_errors``) and
typed messages (``messages``).

A leaf package: no Ray import at module level (the few Ray calls import it lazily) and no import of
``actors``, ``rafka``, ``serve`` or ``jobs``; ``storage`` may import it.
"""
