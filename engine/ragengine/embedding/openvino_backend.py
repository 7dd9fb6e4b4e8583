"""OpenVINO as an embedding backend (CPU, no torch): the same export, compiled by OpenVINO.

Precision: ``auto`` leaves it to OpenVINO, which runs bf16 where the CPU computes it natively
(AVX512-BF16 or AMX: OpenVINO's ``OPTIMIZATION_CAPABILITIES`` lists ``BF16``) and f32 elsewhere.
Measured on this machine's CPU (AVX512-BF16) against sentence-transformers in fp32: bf16 cosine min
0.99994 on 200 bench passages, at 2.4x the torch fp32 model's tokens/s on two cores; f32 OpenVINO
1.3x, ONNX Runtime 1.15x (docs/performance.md). ``f32`` forces full precision.

Where inference runs below f32 (bf16, f16), the model is read from its OpenVINO form with fp16 weights
(``openvino_ir``: made once, cached on disk, mapped) rather than from the fp32 ONNX file, whose weights stayed in
memory in float32 beside the compiled models (106 MiB less for all-MiniLM-L6-v2, same vectors to cosine 0.99997);
f32 inference reads the ONNX file as before.

Document passes use a model compiled with one stream (of one thread) per core, queries one compiled for
a single thread, both from one read of the file, dropped once they are compiled. An infer request holds its
own buffers and is not thread-safe, so each calling thread gets its own (the compiled model is shared).

A lone query of up to ``SHORT_QUERY_TOKENS`` tokens (three quarters of the Python FAQ's questions) runs on a
third model, compiled for exactly that shape and padded to it. The dynamic model re-prepares its layers
whenever the input length differs from the last call's, which is nearly every query: on the FAQ's 176
questions in the order asked, 5.5-6.6 ms per forward pass, against 4.0-5.4 ms for the same questions sorted by
length and 3.6-4.0 ms on static models (docs/performance.md, "What was removed from the turn"). It costs about 30 MiB
(a compiled model holds its own repacked weights) and half a second of compiling, beside the engine's imports
at start-up (``embedding/early.py``). It runs on two threads where the documents have
two cores: 2.0-2.7 ms against one thread's 3.0-3.6 for a 16-token pass, and no slower while two document
streams keep both cores busy (8.2-8.9 ms against 7.9-8.2). A lone query is the case when the engine is not
busy with other queries; under load they come in batches, which run on the dynamic model's one thread.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragengine.embedding.exported import ExportedModel, Feed, Run

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "f32", "bf16")
SHORT_QUERY_TOKENS = 16  # the static model's length: see the module docstring
SHORT_QUERY_THREADS = 2  # its threads, where the document streams have as many cores: see the module docstring


class OpenVinoBackend(ExportedModel):
    name = "openvino"

    def __init__(self, model_dir: str | Path, onnx_file: str | Path, batch_size: int, threads: int | None = None,
                 precision: str = "auto", cache_dir: str | Path | None = None, defer: bool = False) -> None:
        """``cache_dir``: where the fp16 OpenVINO form is made when the export's folder cannot hold it.
        ``defer``: the lone-query model is compiled by ``finish()``, not here (the engine's start-up: it
        serves on the dynamic model meanwhile)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        self._precision = precision
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._model: Any = None
        self.model_file = Path(onnx_file)  # the file the model is read from: the ONNX export or its fp16 IR
        super().__init__(model_dir, onnx_file, batch_size, threads)
        if not defer:
            self.finish()

    def finish(self) -> None:
        """Compile the lone-query model, then drop the read model (compiled for its three roles from one read:
        120 MiB less than reading it twice). Once; a later call does nothing."""
        model, self._model = self._model, None
        if model is not None:
            self._short_queries = self._compile_short(model)

    def _compile_short(self, model: Any) -> tuple[int, Run] | None:
        """The model for lone short queries. Compiled with the others, or by ``finish`` in the thread that loaded
        them (embedding/early.py: a thread the interpreter waits for at exit). Compiled in a thread of its own,
        an interpreter that exited soon after crashed in OpenVINO (exit codes -11 and -6, seen)."""
        try:
            short = model.clone()  # shares the read model's weights
            short.reshape({port.get_any_name(): [1, SHORT_QUERY_TOKENS] for port in short.inputs})
            return SHORT_QUERY_TOKENS, self._compiled(short, 1, min(SHORT_QUERY_THREADS, self.threads))[0]
        except Exception:  # a model whose inputs are not (batch, tokens): every query runs the dynamic model
            log.warning("no static model for short queries; every query runs the dynamic model", exc_info=True)
            return None

    def _read(self, core: Any, onnx_file: Path) -> Any:
        """The model to compile: from the fp16 IR unless inference runs in f32 (forced, or OpenVINO's choice
        on this CPU), where the ONNX file's fp32 weights are read as they are."""
        from ragengine.embedding import openvino_ir

        runs = self._precision if self._precision != "auto" else core.get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()
        if runs != "f32":
            xml = openvino_ir.ensure(onnx_file, self._cache_dir)
            if xml is not None:
                self.model_file = xml
        return core.read_model(str(self.model_file))  # an IR's weights are mapped (OpenVINO's default), not read

    def _compile(self, onnx_file: Path, streams: int) -> tuple[Run, set[str]]:
        if self._model is None:
            import openvino as ov

            self._model = self._read(ov.Core(), onnx_file)
        return self._compiled(self._model, streams)

    def _compiled(self, model: Any, streams: int, threads: int | None = None) -> tuple[Run, set[str]]:
        """``streams`` streams of one thread each, or one stream of ``threads`` threads."""
        import openvino as ov

        config: dict[str, Any] = {"NUM_STREAMS": streams, "INFERENCE_NUM_THREADS": threads or streams}
        if self._precision != "auto":
            config["INFERENCE_PRECISION_HINT"] = self._precision
        compiled = ov.Core().compile_model(model, "CPU", config)
        self.precision = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()  # what OpenVINO chose: f32, bf16
        local = threading.local()

        def run(feed: Feed) -> np.ndarray:
            request = getattr(local, "request", None)
            if request is None:
                request = local.request = compiled.create_infer_request()
            return request.infer(feed)[0]

        return run, {name for port in compiled.inputs for name in port.get_names()}
