"""The operator's lowest floor: how it reaches servers it does not control, bounded.

- ``egress``: which hosts a tenant-supplied URL may reach (pure rules, plus the one resolver), and the
  address a connection is pinned to.
- ``http``: one request, or a GET following redirects, under ONE total deadline (every connect, read and
  write waits at most until it), pinned to the address resolved (and checked, with an egress policy), with
  the body decoded here and cut at a byte cap. ``request`` reads a whole (capped) answer.
- ``transport``: the same as an httpx transport, for code that speaks httpx (the sync worker's engine
  client, traced through httpx's instrumentation).

Every call the operator makes to a server a tenant controls goes through here: a source's URLs and git
host, the inference URL's ``/models``, and each tenant's engine (``/health``, ``/ready``, the source syncs'
reads and writes), since the engine's image is the tenant's to choose. Nothing here imports the rest of
the operator.
"""
