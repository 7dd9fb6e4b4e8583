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
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from ragengine.embedding.exported import ExportedModel, Feed, Run

PRECISIONS = ("auto", "f32", "bf16")


class OpenVinoBackend(ExportedModel):
    name = "openvino"

    def __init__(self, model_dir: str | Path, onnx_file: str | Path, batch_size: int, threads: int | None = None,
                 precision: str = "auto", cache_dir: str | Path | None = None) -> None:
        """``cache_dir``: where the fp16 OpenVINO form is made when the export's folder cannot hold it."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        self._precision = precision
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._model: Any = None
        self.model_file = Path(onnx_file)  # the file the model is read from: the ONNX export or its fp16 IR
        super().__init__(model_dir, onnx_file, batch_size, threads)
        self._model = None  # compiled twice from one read: 120 MiB less than compiling the file twice

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
        import openvino as ov

        core = ov.Core()
        if self._model is None:
            self._model = self._read(core, onnx_file)
        config: dict[str, Any] = {"NUM_STREAMS": streams, "INFERENCE_NUM_THREADS": streams}
        if self._precision != "auto":
            config["INFERENCE_PRECISION_HINT"] = self._precision
        compiled = core.compile_model(self._model, "CPU", config)
        self.precision = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()  # what OpenVINO chose: f32, bf16
        local = threading.local()

        def run(feed: Feed) -> np.ndarray:
            request = getattr(local, "request", None)
            if request is None:
                request = local.request = compiled.create_infer_request()
            return request.infer(feed)[0]

        return run, {name for port in compiled.inputs for name in port.get_names()}
