"""vLLM's command line: what the pinned release accepts, and which of a user's `inference.args` would
override the flags the operator manages.

`vllm_flags.json` holds every option of `vllm serve` in the release the operator renders for
(constants.VLLM_VERSION) with the number of values each takes (argparse's nargs), plus that release's
tool-call parsers. hack/vllm_flags.py extracts it from the release's own argument parser (and parses the
operator's rendered command lines with it); tests/operator/test_vllm_args.py checks every rendered
command line against it.

How vLLM reads its argv, and so how a flag can be overridden (vllm/utils/argparse_utils.py): a later
option wins over an earlier one; `--max_model_len` is `--max-model-len` (underscores become dashes);
argparse accepts any unique prefix of an option (`--served-model` is `--served-model-name`); a
positional argument is the model tag and replaces `--model`; `--config FILE` reads more options from a
YAML file, and `--uds PATH` serves on a Unix socket instead of the host and port.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

# Options whose effect the operator's own flags cannot survive, refused whatever the spec says.
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


def resolve(option: str, known: dict[str, str] | None = None) -> str | None:
    """The option argparse would take `option` for: itself, or the one option it is a unique prefix of
    (allow_abbrev); None when unknown to the release or ambiguous."""
    known = release().options if known is None else known
    name = canonical(option)
    if name in known:
        return name
    dashes = 2 if name.startswith("--") else 1
    if not name.startswith("-") or len(name) <= dashes:
        return None
    matches = [o for o in known if o.startswith(name) and not o.startswith("-" * (dashes + 1))]
    return matches[0] if len(matches) == 1 else None


def _may_stand_for(name: str, flag: str) -> bool:
    """Whether argparse could read `name` as `flag`: the flag itself or a prefix of it, `-t` of `-tp` too
    (when the prefix is ambiguous vLLM refuses the command line, so refusing it here loses nothing)."""
    dashes = 2 if name.startswith("--") else 1 if name.startswith("-") else 0
    return name == flag or (0 < dashes < len(name) and flag.startswith(name) and not flag.startswith("-" * (dashes + 1)))


def overridden(args: list[str], managed: set[str]) -> list[str]:
    """The managed flags (and OVERRIDING options) that `args` would set, each once, in order."""
    found: list[str] = []
    for arg in args:
        if not arg.startswith("-"):
            continue
        name = canonical(arg)
        for flag in (*sorted(managed), *OVERRIDING):
            if _may_stand_for(name, flag) and flag not in found:
                found.append(flag)
    return found


def positionals(args: list[str]) -> list[str]:
    """Arguments vLLM would take as positional (the model tag): a bare word that is no option's value.

    A bare word is a value when it follows an option written without `=` that takes a value (all the
    words up to the next option, for a list option). An option unknown to the pinned release (a newer
    image's) is assumed to take one; a known switch (nargs 0) takes none, so the word after
    `--enable-prefix-caching` is a model tag.
    """
    flags = release().options
    out: list[str] = []
    takes = "0"  # how many of the following bare words the last option takes: "0", "1" or "many"
    for arg in args:
        if arg.startswith("-") and not _is_number(arg):
            option = resolve(arg)
            nargs = flags.get(option, "1") if option else "1"
            takes = "0" if "=" in arg or nargs == "0" else ("many" if nargs in ("+", "*") else "1")
        elif takes == "1":
            takes = "0"
        elif takes == "0":
            out.append(arg)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
