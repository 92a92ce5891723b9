"""The Flower-free core: what every method and engine shares.

Nothing in this package (nor in ``zofl.algorithms`` or ``zofl.methods``) imports ``flwr``; a test
enforces it. The pieces, each small and named:

* ``protocol``   the wire protocol: ``Work`` (server -> one client) and ``Reply`` (client -> server),
                 named arrays plus config entries, message types, and the seed streams.
* ``method``     ``Method``: the server half of an algorithm as an object with explicit state
                 (``init``, ``plan``, ``update``, ``state_dict`` / ``load_state_dict``).
* ``sampling``   S_r and the stragglers from (seed, round); availability and per-client work.
* ``checks``     reply checks (shapes, finiteness, magnitude).
* ``evaluation`` test accuracy / loss and f1 of a model.
* ``checkpoint`` atomic checkpoints and resume.
* ``summary``    the end-of-run summary (summary.json and the printed lines).
* ``rounds``     ``SyncRun``: one synchronous round as plan -> replies -> update -> record.
* ``asynchronous`` ``AsyncRun``: updates applied as replies arrive, with staleness, on a clock.
"""
