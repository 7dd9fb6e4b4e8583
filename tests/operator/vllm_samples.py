"""vLLM command lines to check with vLLM's own parser (hack/vllm_flags.py) and against the flags it
recorded (test_vllm_args.py).

SAMPLES: specs whose rendered `vllm serve` arguments must parse, with the values the spec asks for.
REFUSED: user arguments (appended to the first sample's) that vLLM reads as a flag the operator manages
(argparse dest), each a form the old check let through; spec.py refuses every one of them.
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
    (["--served-model", "x"], "served_model_name"),  # a unique prefix
    (["--tensor_parallel_size=4"], "tensor_parallel_size"),
    (["-t", "4"], "tensor_parallel_size"),  # a prefix of -tp
    (["--max-model=5"], "max_model_len"),
    (["--port=9000"], "port"),
    (["--host", "127.0.0.1"], "host"),
    (["--enable-prefix-caching", "other/model"], "model"),  # a bare word after a switch is the model tag
    (["--uds", "/tmp/vllm.sock"], "uds"),  # serves on the socket: host and port ignored
    (["--config", "/tmp/absent.yaml"], "model"),  # any option from a file (here: refused for the missing file)
]
