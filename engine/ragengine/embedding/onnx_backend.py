"""ONNX Runtime as an embedding backend (CPU, no torch): the export run by ``onnxruntime``, fp32.

The reference runtime: ``export`` checks every export with it. Where OpenVINO is installed the engine
prefers ``openvino_backend`` (faster on this CPU, see docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path

from ragengine.embedding.exported import ExportedModel, Run


class OnnxBackend(ExportedModel):
    name = "onnx"

    _session: tuple[Run, set[str]] | None = None

    def _compile(self, onnx_file: Path, streams: int) -> tuple[Run, set[str]]:
        """One one-thread session for documents and queries: ``InferenceSession.run`` is thread-safe and
        releases the GIL, so ``streams`` threads and the query thread share it (one copy of the weights)."""
        if self._session is not None:
            return self._session
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self._session = (lambda feed: session.run(None, feed)[0]), {i.name for i in session.get_inputs()}
        return self._session
