"""The benchmarks, one package run from the repository's root: ``python -m bench.bench_engine``,
``python -m bench.run_all``, ``python -m bench.eval.run``. The root is the import root (as pytest's
``pythonpath = ["."]`` makes it for the tests), so ``bench.*`` and the tests' real-server harness
(``tests.support``: engine processes, PostgreSQL, the vLLM-like stub) import without any path edits.
What the scripts share lives in ``bench.common``.
"""

import os

# Every benchmark runs on the packaged embedding model, offline; set before any submodule imports
# transformers or tokenizers (``make`` exports the same, tests/conftest.py sets them for the tests).
for _name, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_name, _value)
