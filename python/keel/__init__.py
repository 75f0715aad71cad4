"""keel: run ONNX models from Python with keel, with ONNX Runtime's API.

``import keel as onnxruntime`` is enough for a script written against ONNX
Runtime's InferenceSession; keel adds its memory figures and reports
(``memory_stats``, ``memory_report``, ``live_blocks``, ``trim``,
``memcheck``).
"""
from ._keel import (__version__, KeelError, InvalidArgument, InvalidModel, Unsupported,
                    OutOfMemory, ShapeError, FileError, StaleHandle, RuntimeFailure,
                    InternalError)
