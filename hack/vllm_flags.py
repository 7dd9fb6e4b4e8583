#!/usr/bin/env python3
"""Check the operator's vLLM command lines with vLLM's own parser, and record that release's options.

    python hack/vllm_flags.py [--version 0.33.0] [--venv DIR]

1. Puts vLLM `--version` into a throwaway venv (default ~/.cache/ragengine/vllm-<version>; never the
   project's): the wheel from PyPI without its dependencies, then its requirements minus the GPU kernel
   packages that parsing never imports. About 8 GB and a few minutes; nothing needs a GPU
   (VLLM_TARGET_DEVICE=cpu lets the parser's defaults resolve on a CPU).
2. Renders the command line of every spec in tests/operator/vllm_samples.py with the operator's code, and
   parses each with the `vllm serve` parser of that release, as `vllm serve ...` would
   (FlexibleArgumentParser, then the serve command's own validation): each must parse, and the model,
   served name, port, host, tensor-parallel size, context length, revision and tool parser vLLM reads
   must be what the spec says. The user arguments the operator refuses (REFUSED in the samples) are parsed
   after the operator's flags, to show that vLLM would read each one as a flag the operator manages; the
   ones the CRD cannot tell apart (OUTVOTED: unique prefixes) are parsed as rendered, to show that the
   operator's flags, which come last, win.
3. Writes operator/ragengine_operator/vllm_flags.json: every option of that parser with its nargs, the
   tool-call parsers, and the checked command lines. tests/operator/test_vllm_args.py holds the operator
   to it in `make test` (no vLLM needed there).

Run it again after changing what the operator renders, or to move to another vLLM release (then update
constants.VLLM_VERSION).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "operator" / "ragengine_operator" / "vllm_flags.json"
# Requirements of the wheel that only matter on a GPU (kernels, codecs): parsing never imports them.
GPU_ONLY = re.compile(r"^(torchaudio|torchvision|torchcodec|pynvvideocodec|flashinfer|apache-tvm|tilelang|nvidia|nvtx|"
                      r"fastsafetensors|instanttensor|quack|tokenspeed|humming|zentorch|numba|certifi)", re.I)
# What vLLM reads from a command line, by argparse dest, compared with what the spec asked for.
READ = ("model", "served_model_name", "port", "host", "tensor_parallel_size", "max_model_len", "revision",
        "tool_call_parser", "enable_auto_tool_choice", "uds")


# --- inside the vLLM venv ------------------------------------------------------------------------
def dump(command_lines: list[list[str]]) -> dict[str, Any]:
    """The `vllm serve` parser's options, the tool parsers, and what it reads from each command line."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.tool_parsers import ToolParserManager
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def parser() -> tuple[Any, Any, Any]:
        top = FlexibleArgumentParser(description="vLLM CLI")  # as vllm/entrypoints/cli/main.py builds it
        sub = top.add_subparsers(required=False, dest="subparser")
        command = ServeSubcommand()
        serve = command.subparser_init(sub)
        return top, serve, command

    top, serve, command = parser()
    options: dict[str, str] = {}
    for action in serve._actions:
        nargs = action.nargs
        text = "1" if nargs is None else str(nargs)
        for option in action.option_strings:
            options[option] = text
    parsed = []
    for argv in command_lines:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = top.parse_args(["serve", *argv])
                command.validate(ns)
            model = ns.model_tag if getattr(ns, "model_tag", None) is not None else ns.model
            parsed.append({"argv": argv, "read": {**{k: getattr(ns, k, None) for k in READ}, "model": model}})
        except (SystemExit, Exception) as exc:  # argparse exits on errors, after printing them
            parsed.append({"argv": argv, "error": f"{type(exc).__name__}: {exc} {err.getvalue().strip()[-300:]}"})
    import vllm

    return {"vllm": vllm.__version__, "options": dict(sorted(options.items())),
            "tool_call_parsers": sorted(ToolParserManager.list_registered()), "parsed": parsed}


# --- in the project's venv -----------------------------------------------------------------------
def ensure_venv(venv: Path, version: str) -> Path:
    python = venv / "bin" / "python"
    check = [str(python), "-c", f"import importlib.metadata as m; assert m.version('vllm') == {version!r}"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([str(python), "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, f"vllm=={version}"], check=True)
        (wheel,) = Path(tmp).glob("vllm-*.whl")
        print(f"wheel {wheel.name} sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}", file=sys.stderr)
        requires = subprocess.run([str(python), "-c", (
            "import sys, zipfile, email; z = zipfile.ZipFile(sys.argv[1]); "
            "meta = next(n for n in z.namelist() if n.endswith('.dist-info/METADATA')); "
            "print('\\n'.join(email.message_from_bytes(z.read(meta)).get_all('Requires-Dist') or []))"), str(wheel)],
            check=True, capture_output=True, text=True).stdout.splitlines()
        keep = [r for r in requires if "extra ==" not in r and not GPU_ONLY.match(r)]
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *keep], check=True)
    return python


def expected(spec: Any) -> dict[str, Any]:
    from ragengine_operator.manifests.inference import tool_call_parser

    inf = spec.inference
    parser = tool_call_parser(inf)
    return {"model": inf.model, "served_model_name": [inf.served_model_name or inf.model], "port": 8000,
            "host": "0.0.0.0", "tensor_parallel_size": inf.gpus,
            "max_model_len": inf.context_window if inf.context_window is not None else -1,  # -1: auto
            "revision": inf.revision, "tool_call_parser": parser, "enable_auto_tool_choice": parser is not None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=None, help="vLLM release (default: constants.VLLM_VERSION)")
    ap.add_argument("--venv", type=Path, default=None)
    ap.add_argument("--dump", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)  # inside the vLLM venv
    opts = ap.parse_args()
    if opts.dump:
        lines = json.loads(Path(opts.dump[0]).read_text())
        Path(opts.dump[1]).write_text(json.dumps(dump(lines), default=str))
        return 0

    sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "engine")]
    from ragengine_operator import constants as c
    from ragengine_operator.manifests.inference import vllm_args
    from ragengine_operator.spec import RAGEngineSpec
    from tests.operator.vllm_samples import OUTVOTED, REFUSED, SAMPLES

    version = opts.version or c.VLLM_VERSION
    python = ensure_venv(opts.venv or Path.home() / ".cache" / "ragengine" / f"vllm-{version}", version)
    specs = [RAGEngineSpec.model_validate(s) for s in SAMPLES]
    rendered = [vllm_args(spec) for spec in specs]
    base = rendered[0]
    # REFUSED forms after the operator's flags (where the operator used to put user args): vLLM reads the
    # user's value, hence the refusal. OUTVOTED forms as the operator renders them, before its flags.
    refused = [base + args for args, _ in REFUSED]
    outvoted = [vllm_args(RAGEngineSpec.model_validate({"inference": {**SAMPLES[0]["inference"], "args": args}}))
                for args, _ in OUTVOTED]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.json").write_text(json.dumps(rendered + refused + outvoted))
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        subprocess.run([str(python), __file__, "--dump", f"{tmp}/in.json", f"{tmp}/out.json"], check=True, env=env)
        result = json.loads((Path(tmp) / "out.json").read_text())
    parsed = result["parsed"]
    failures = []
    checked = []
    for spec, entry in zip(specs, parsed[: len(specs)], strict=True):
        want = expected(spec)
        got = entry.get("read")
        ok = got is not None and all(got[k] == v for k, v in want.items())
        print(f"{'ok  ' if ok else 'FAIL'} {' '.join(entry['argv'])}")
        if not ok:
            failures.append(f"{entry['argv']}: {entry.get('error') or {k: (got[k], v) for k, v in want.items() if got[k] != v}}")
        checked.append({"argv": entry["argv"], "read": got})
    base_read = parsed[0]["read"]
    for (args, dest), entry in zip(REFUSED, parsed[len(specs): len(specs) + len(REFUSED)], strict=True):
        got = entry.get("read")
        # vLLM reads the user's value for `dest` (or refuses the command line): the operator must refuse it
        overrides = got is None or got.get(dest) != base_read.get(dest)
        print(f"{'ok  ' if overrides else 'FAIL'} refused {args}: after the operator's flags vLLM reads {dest}="
              f"{got.get(dest) if got else entry.get('error')}")
        if not overrides:
            failures.append(f"{args}: vLLM does not read it as {dest}; the operator need not refuse it")
    checked_outvoted = []
    for (args, dest), entry in zip(OUTVOTED, parsed[len(specs) + len(REFUSED):], strict=True):
        got = entry.get("read")
        wins = got is not None and got[dest] == base_read[dest]
        print(f"{'ok  ' if wins else 'FAIL'} outvoted {args}: before the operator's flags vLLM reads {dest}="
              f"{got.get(dest) if got else entry.get('error')}")
        if not wins:
            failures.append(f"{args}: the operator's {dest} does not win")
        checked_outvoted.append({"argv": entry["argv"], "read": got})
    OUT.write_text(json.dumps({
        "vllm": result["vllm"],
        "made_by": "hack/vllm_flags.py: the `vllm serve` parser of this release (VLLM_TARGET_DEVICE=cpu)",
        "options": result["options"],
        "tool_call_parsers": result["tool_call_parsers"],
        "checked": checked,
        "outvoted": checked_outvoted,
    }, indent=1) + "\n")
    print(f"{len(result['options'])} options, {len(result['tool_call_parsers'])} tool parsers -> {OUT.relative_to(ROOT)}")
    for failure in failures:
        print("FAIL", failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
