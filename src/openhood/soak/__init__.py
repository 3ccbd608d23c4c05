"""``openhood soak``: long mixed traffic against a server while sampling its memory, to catch leaks.

``traffic`` builds the request mix from the server's ``/v1/models``, ``runner`` drives it and
samples ``/debug/memory``, ``analysis`` fits the growth and ranks growing sites and types,
``report`` writes JSON and HTML, ``launch`` starts a server of its own. HTTP only: the soak never
imports the server, so it measures any server that exposes ``/debug/memory``.
"""
