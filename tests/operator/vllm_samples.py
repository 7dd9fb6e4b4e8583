"""vLLM command lines to check with vLLM's own parser (hack/vllm_flags.py) and against the options it
recorded (test_vllm_args.py).

SAMPLES: specs whose rendered `vllm serve` arguments must parse, with the values the spec asks for.
REFUSED: user arguments that vLLM reads as a flag the operator manages (argparse dest), which spec.py
  and the CRD refuse (the old check let each through).
OUTVOTED: user arguments that vLLM also reads as a managed flag, but which the CRD's CEL cannot tell
  apart from others (unique prefixes); the operator's flags come after them and win.
"""

from __future__ import annotations

from typing import Any

SAMPLES: list[dict[str, Any]] = [
    {"inference": {"model": "Qwen/Qwen2.5-7B-Instruct"}},
    {"inference": {"model": "Qwen/Qwen2.5-7B-Instruct", "servedModelName": "qwen-7b", "gpus": 2, "contextWindow": 16384,
                   "revision": "a09a35458c702b33eeacc393d103063234e8bc28",
                   "args": ["--enable-prefix-caching", "--gpu-memory-utilization=0.9", "--max-num-seqs", "64"]}},
    {"inference": {"model": "meta-llama/Llama-3.1-8B-Instruct", "toolCallParser": "none", "gpus": 8}},
    {"inference": {"model": "mistralai/Mistral-7B-Instruct-v0.3", "toolCallParser": "hermes"}},
    {"inference": {"model": "some-org/unknown-model", "args": ["--dtype", "bfloat16", "--trust-remote-code"]}},
    {"inference": {"model": "Qwen/Qwen3-30B-A3B", "gpuResourceName": "nvidia.com/mig-3g.40gb"}},
]

REFUSED: list[tuple[list[str], str]] = [
    (["--max_model_len=99"], "max_model_len"),
    (["--served_model_name", "x"], "served_model_name"),
    (["--tensor_parallel_size=4"], "tensor_parallel_size"),
    (["--port=9000"], "port"),
    (["--host", "127.0.0.1"], "host"),
    (["other/model"], "model"),  # a leading bare word is the model tag
    (["--uds", "/tmp/vllm.sock"], "uds"),  # serves on the socket: host and port ignored
    (["--config", "/tmp/absent.yaml"], "model"),  # any option from a file (here: refused for the missing file)
]

OUTVOTED: list[tuple[list[str], str]] = [
    (["--served-model", "x"], "served_model_name"),
    (["-t", "4"], "tensor_parallel_size"),  # a prefix of -tp
    (["--max-model=5"], "max_model_len"),
]
