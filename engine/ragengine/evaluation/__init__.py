"""Evaluation inside the product (docs/evaluation.md): golden sets scored on index versions through the code
``/retrieve`` runs (``runner``, ``metrics``), runs kept in the sessions' database (``store``), the API's
service and the gate a re-index applies before its swap (``service``, ``gate``), the engine's evaluation file
and its schedule (``config``, ``schedule``), and ``ragengine eval`` (``cli``)."""
