"""keel: run ONNX models from Python with keel, through ONNX Runtime's API.

``import keel as onnxruntime`` is enough for a script written against ONNX
Runtime's InferenceSession. keel adds its memory figures and reports under
the names PyTorch users know: ``sess.memory_stats()``,
``sess.memory_report(top)``, ``sess.live_blocks()``, ``sess.trim()`` and
``keel.memcheck(model, feeds, iters)``; ``keel.Trainer`` trains (one
process or data-parallel over MPI). Errors are ``keel.KeelError``
subclasses carrying keel's message (what and where).
"""
from ._keel import (__version__, KeelError, InvalidArgument, InvalidModel, Unsupported,
                    OutOfMemory, ShapeError, FileError, StaleHandle, RuntimeFailure,
                    InternalError, process_bytes)
from ._session import (InferenceSession, SessionOptions, RunOptions, GraphOptimizationLevel,
                       ExecutionMode, ExecutionOrder, NodeArg, ModelMetadata,
                       get_available_providers, get_all_providers, get_device,
                       get_version_string)
from ._memcheck import memcheck, MemcheckResult
from ._train import Trainer

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel",
    "ExecutionMode", "ExecutionOrder", "NodeArg", "ModelMetadata", "get_available_providers",
    "get_all_providers", "get_device", "get_version_string", "memcheck", "MemcheckResult", "Trainer",
    "process_bytes", "KeelError", "InvalidArgument", "InvalidModel", "Unsupported",
    "OutOfMemory", "ShapeError", "FileError", "StaleHandle", "RuntimeFailure", "InternalError",
    "__version__",
]
