"""The tests' one family of fixtures (STYLE 17: Nomad's TestServer/TestJoin/WaitForResult).

- :mod:`.wait`: the one polling helper, ``wait_until`` / ``wait_until_async``.
- :mod:`.inprocess`: an in-process daemon (the real ``serve`` or app, in a thread of the test).
- :mod:`.cluster`: an in-process cluster, N ``ClusterService`` nodes on loopback in the test's
  loop (:class:`~.cluster.Cluster`), and :mod:`.pipeline`, the same cluster with every box's
  job pipeline (:class:`~.pipeline.Boxes`, :class:`~.pipeline.Lone`).
- :mod:`.processes`: real ``floydd`` processes on loopback, one box or a formed cluster, and
  the ``floydd`` CLI helper.
- :mod:`.netns`: real ``floydd`` processes on network-namespace hosts, formed into a cluster.
- :mod:`.leftovers`: the check, at the end of each test process's session, that no daemon,
  agent or sandbox the tests started is still running.
"""
