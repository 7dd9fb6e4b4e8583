"""The bounded parser: costly file formats are read in a child process with budgets.

A PDF's pages can all point at one large content stream, which the parser decodes again for each
page: 16 KB took 52 s of CPU (issue 22). So every format whose cost is not linear in its size is
parsed by ``python -m ragengine.parsing.worker`` under ``ParseLimits``: a CPU-time rlimit
(``RLIMIT_CPU``), an address-space rlimit (``RLIMIT_AS``), a wall-clock deadline, a page cap, and
a character cap at which it stops. The child gets no secrets (a minimal environment) and no open
descriptors but its pipes. A file over a budget is refused with a reason that says which.

- ``limits``: ``ParseLimits`` and the result types (``Parsed``, ``Refused``), pure.
- ``sandbox``: ``parse(kind, data, limits)``, the parent side (one child per file).
- ``worker``: the child's entry point; ``formats``: the readers it dispatches to.

Callers: ``ragengine.filetypes.to_document`` (the operator's source sync and ``ragengine index``)
and the engine's uploads (``conversations.ingestion``), which parse each file once, when accepted.
"""
