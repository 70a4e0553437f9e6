"""``manage.py demo``: the whole product on one machine (demo/management/commands/demo.py).

An app of its own because it is the one part of the server's tree that runs the
client side too (the team host and its sessions, with the SDK's model
registry): nothing of the server imports it, and no server package but this one
imports the SDK (tests/test_import_graph.py).
"""
