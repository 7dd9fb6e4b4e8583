"""vLLM's command line: what the pinned release accepts, and which of a user's `inference.args` the
operator refuses because vLLM would read them as one of its own flags.

`vllm_flags.json` holds every option of `vllm serve` in the release the operator renders for
(constants.VLLM_VERSION) with the number of values each takes (argparse's nargs), plus that release's
tool-call parsers. hack/vllm_flags.py extracts it from the release's own argument parser (and parses the
operator's rendered command lines with it); tests/operator/test_vllm_args.py checks every rendered
command line against it.

How vLLM reads its argv (vllm/utils/argparse_utils.py), and what the operator does about each way a
user's argument could override its flags:
- a later option wins over an earlier one: the operator renders the user's args first, its own flags
  last, so every spelling of them loses (unique prefixes such as `--served-model` included);
- `--max_model_len` is `--max-model-len` (underscores become dashes): refused, like the exact names;
- `--config FILE` reads options from a YAML file and `--uds PATH` serves on a Unix socket instead of the
  host and port: refused;
- a positional argument is the model tag: a leading one is refused; any other makes vLLM refuse its
  command line at start (a second positional beside the operator's model), which the operator reports
  as a CrashLoopBackOff.
The refusals are exactly the CRD's CEL rules (hack/crd-overlay.yaml), so the API server and the operator
never disagree on a spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

# Options whose effect the operator's flags cannot survive, whatever comes after them.
OVERRIDING = ("--config", "--uds")


@dataclass(frozen=True)
class Flags:
    version: str
    options: dict[str, str]  # option string -> nargs ("0" for a switch, "1" for one value, "?", "+", "*")
    tool_call_parsers: tuple[str, ...]


@cache
def release() -> Flags:
    data: dict[str, Any] = json.loads(resources.files(__package__).joinpath("vllm_flags.json").read_text())
    return Flags(data["vllm"], data["options"], tuple(data["tool_call_parsers"]))


def canonical(option: str) -> str:
    """The option vLLM's parser sees: `--a_b=x` -> `--a-b` (FlexibleArgumentParser), `-tp=2` -> `-tp`."""
    name = option.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def overridden(args: list[str], flags: set[str] | frozenset[str]) -> list[str]:
    """Which of `flags` (and of OVERRIDING) `args` set, in any spelling vLLM reads the same, each once."""
    found: list[str] = []
    for arg in args:
        name = canonical(arg) if arg.startswith("-") else None
        if name is not None and (name in flags or name in OVERRIDING) and name not in found:
            found.append(name)
    return found


def leading_positional(args: list[str]) -> str | None:
    """A first argument that is no option: vLLM would take it for the model tag."""
    return args[0] if args and not args[0].startswith("-") else None
