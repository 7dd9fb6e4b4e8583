"""What the operator reads from a Hugging Face model id, offline: the tool-call parser of the model's
family, and the size of its weights (for the vLLM pod's host-memory request). Pure: no download, no hub.

Tool-call parsers follow vLLM's tool-calling documentation for each family; every default must be one of
the pinned release's parsers (vllm_flags.json, checked by the tests). A model outside the table gets no
parser (tool calls off) unless inference.toolCallParser names one.

Sizes come from the parameter count in the id (`Qwen2.5-7B-Instruct`, `Mixtral-8x7B`, `Qwen3-30B-A3B`,
`SmolLM2-135M`) and the bytes per parameter its quantisation suffix implies (AWQ/GPTQ/int4: 4 bits, FP8 and
int8: 8 bits, else bf16).
"""

from __future__ import annotations

import math
import re

# (pattern on the lower-cased id after the organisation, parser): the first match wins.
TOOL_PARSERS: tuple[tuple[str, str], ...] = (
    (r"qwen3-coder", "qwen3_coder"),
    (r"qwen2\.5|qwen3|qwq", "hermes"),
    (r"hermes", "hermes"),
    (r"llama-4", "llama4_pythonic"),
    (r"llama-3\.[123]", "llama3_json"),
    (r"mistral|mixtral|ministral|devstral|magistral", "mistral"),
    (r"granite-4", "granite4"),
    (r"granite", "granite"),
    (r"gpt-oss", "openai"),
    (r"deepseek-v3\.1", "deepseek_v31"),
    (r"deepseek-v3", "deepseek_v3"),
    (r"glm-4\.[56]", "glm45"),
    (r"kimi-k2", "kimi_k2"),
    (r"phi-4-mini", "phi4_mini_json"),
    (r"internlm", "internlm"),
)
OFF = "none"  # inference.toolCallParser: none turns the family default off

_SIZE = re.compile(r"(?<![a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?![a-z])")
_FOUR_BIT = re.compile(r"awq|gptq|int4|4bit|w4a16|nf4|bnb|mxfp4|gpt-oss")
_EIGHT_BIT = re.compile(r"fp8|int8|8bit|w8a8")

MIN_MEMORY_GI = 16  # what a small model's vLLM needs on the host (API server, engine core, CUDA contexts)
PER_GPU_GI = 4  # each tensor-parallel worker's own CUDA context, pinned buffers and NCCL


def _name(model: str) -> str:
    return model.rsplit("/", 1)[-1].lower()


def default_tool_call_parser(model: str) -> str | None:
    name = _name(model)
    for pattern, parser in TOOL_PARSERS:
        if re.search(pattern, name):
            return parser
    return None


def parameters_billions(model: str) -> float | None:
    """The largest parameter count in the id ("30B-A3B" is 30, "8x7B" is 56), or None without one."""
    counts = []
    for experts, number, unit in _SIZE.findall(_name(model)):
        value = float(number) * (int(experts) if experts else 1)
        counts.append(value / 1000 if unit == "m" else value)
    return max(counts) if counts else None


def weights_gib(model: str) -> float | None:
    params = parameters_billions(model)
    if params is None:
        return None
    name = _name(model)
    bytes_per_param = 0.55 if _FOUR_BIT.search(name) else 1.0 if _EIGHT_BIT.search(name) else 2.0
    return params * 1e9 * bytes_per_param / 2**30


def host_memory_request(model: str, gpus: int) -> str:
    """Host memory to request for vLLM: the weights (staged through the page cache while loading) plus
    each GPU worker's share, at least MIN_MEMORY_GI; MIN_MEMORY_GI when the id says no size."""
    weights = weights_gib(model)
    if weights is None:
        return f"{MIN_MEMORY_GI}Gi"
    return f"{max(MIN_MEMORY_GI, math.ceil(weights + PER_GPU_GI * gpus))}Gi"
