"""The engine as a Model Context Protocol server (docs/mcp.md): ``shapes`` (pure: the tools, their arguments
and results, document ids and resource URIs), ``server`` (the official SDK's low-level ``Server`` with the
handlers: who calls, the same authorization as every route, the registry), ``resources`` (each index's
documents as resources). The transport (``/mcp``, streamable HTTP) is mounted by ``ragengine.api.mcp``."""
