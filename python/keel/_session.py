"""ONNX Runtime's Python API over keel: InferenceSession, SessionOptions,
RunOptions and their companions, plus keel's memory figures.

What ONNX Runtime accepts, keel accepts: options it has no use for
(graph optimisation levels, thread counts, arena switches) are kept and
reported back, and settings ONNX Runtime would only warn about (an
unavailable provider, an unknown config entry) warn here too. What ONNX
Runtime refuses (an unknown attribute, a value of the wrong type, a
malformed provider list) raises the same kind of error.
"""
import datetime
import enum
import json
import os
import warnings

from . import _keel

_PROVIDERS = ["CPUExecutionProvider"]


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels; keel plans every graph the same way."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


_CUDA = "CUDAExecutionProvider"


def get_available_providers():
    """['CUDAExecutionProvider', 'CPUExecutionProvider'] where an NVIDIA GPU
    is usable (keel opens libcuda.so.1 at run time), else
    ['CPUExecutionProvider']."""
    return ([_CUDA] if _keel.gpu_count() > 0 else []) + list(_PROVIDERS)


def get_all_providers():
    return [_CUDA] + list(_PROVIDERS)


def get_device():
    return "GPU" if _keel.gpu_count() > 0 else "CPU"


def get_version_string():
    return _keel.__version__


def _typed(name, value, kinds):
    """ONNX Runtime's options are typed: a wrong type is a TypeError."""
    if isinstance(value, bool) and bool not in kinds:
        raise TypeError(f"{name}: expected {kinds[0].__name__}, got bool")
    if not isinstance(value, kinds):
        raise TypeError(f"{name}: expected {kinds[0].__name__}, got {type(value).__name__}")
    return value


class _Options:
    """Attributes are declared in _FIELDS {name: (types, default)}; any
    other attribute is refused, as ONNX Runtime's (pybind) objects do."""
    _FIELDS = {}
    __slots__ = ("_values", "_config")

    def __init__(self):
        object.__setattr__(self, "_values", {k: d for k, (_, d) in self._FIELDS.items()})
        object.__setattr__(self, "_config", {})

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        kinds = self._FIELDS[name][0]
        if int in kinds and isinstance(value, enum.IntEnum):
            value = int(value)
        self._values[name] = _typed(name, value, kinds)

    def add_session_config_entry(self, key, value):
        self._config[_typed("key", key, (str,))] = _typed("value", value, (str,))

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_run_config_entry(self, key, value):
        self.add_session_config_entry(key, value)

    def get_run_config_entry(self, key):
        return self.get_session_config_entry(key)

    def __repr__(self):
        return f"{type(self).__name__}({self._values})"


class SessionOptions(_Options):
    """ONNX Runtime's SessionOptions, plus keel's mem_limit (a cap on
    reserved bytes, 0 = none) and enable_mem_report (record per-node memory
    for InferenceSession.memory_report)."""
    _FIELDS = {
        "intra_op_num_threads": ((int,), 0),
        "inter_op_num_threads": ((int,), 0),
        "graph_optimization_level": ((int,), GraphOptimizationLevel.ORT_ENABLE_ALL),
        "execution_mode": ((int,), ExecutionMode.ORT_SEQUENTIAL),
        "execution_order": ((int,), ExecutionOrder.DEFAULT),
        "log_severity_level": ((int,), 2),
        "log_verbosity_level": ((int,), 0),
        "logid": ((str,), ""),
        "enable_profiling": ((bool,), False),
        "profile_file_prefix": ((str,), "onnxruntime_profile_"),
        "optimized_model_filepath": ((str,), ""),
        "enable_cpu_mem_arena": ((bool,), True),
        "enable_mem_pattern": ((bool,), True),
        "enable_mem_reuse": ((bool,), True),
        "use_deterministic_compute": ((bool,), False),
        "mem_limit": ((int,), 0),
        "enable_mem_report": ((bool,), False),
    }
    __slots__ = ()

    def register_custom_ops_library(self, path):
        raise _keel.Unsupported(f"custom op libraries are not supported by keel ({path})")

    def add_free_dimension_override_by_name(self, name, value):
        warnings.warn(f"keel: free dimension override '{name}' is ignored", RuntimeWarning, 2)

    def add_initializer(self, name, value):
        raise _keel.Unsupported(f"SessionOptions.add_initializer('{name}') is not supported by keel")


class RunOptions(_Options):
    """ONNX Runtime's RunOptions. terminate=True makes run() refuse to start."""
    _FIELDS = {
        "log_severity_level": ((int,), 2),
        "log_verbosity_level": ((int,), 0),
        "logid": ((str,), ""),
        "terminate": ((bool,), False),
        "only_execute_path_to_fetches": ((bool,), False),
        "synchronize_execution_providers": ((bool,), True),
    }
    __slots__ = ()


class NodeArg:
    """A graph input or output: .name, .type ('tensor(float)',
    'seq(tensor(int64))', ...) and .shape (ints, dimension names, None)."""
    __slots__ = ("name", "type", "shape", "optional", "has_default")

    def __init__(self, desc):
        self.name, self.type, self.shape, _, self.optional, self.has_default, _ = desc
        self.optional, self.has_default = bool(self.optional), bool(self.has_default)

    def __repr__(self):
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


class ModelMetadata:
    """producer_name, graph_name, graph_description, domain, description,
    version and custom_metadata_map, as ONNX Runtime gives them."""

    def __init__(self, meta):
        self.producer_name = meta["producer_name"]
        self.graph_name = meta["graph_name"]
        self.graph_description = meta["graph_description"]
        self.domain = meta["domain"]
        self.description = meta["description"]
        self.version = meta["version"]
        self.custom_metadata_map = dict(meta["custom_metadata_map"])

    def __repr__(self):
        return f"ModelMetadata({vars(self)})"


def _check_providers(providers, provider_options):
    """ONNX Runtime's rules: names (or (name, options) pairs); an
    unavailable one warns and falls back to the CPU. Returns the device the
    session runs on: "cuda:N" when CUDAExecutionProvider comes first among
    the available ones (its option device_id gives N), else None (the
    CPU)."""
    if providers is None:
        return None
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
    available = get_available_providers()
    device = None
    chosen = False
    for i, p in enumerate(providers):
        opts = provider_options[i] if provider_options is not None else {}
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], dict):
                raise ValueError("Only str or (str, dict) tuples are supported as providers: "
                                 f"got {p!r}")
            p, opts = p
        elif not isinstance(p, str):
            raise ValueError(f"Provider must be a str or a (str, dict) tuple, got {p!r}")
        if p not in available:
            warnings.warn(f"Specified provider '{p}' is not in available provider names."
                          f"Available providers: '{', '.join(available)}'", UserWarning, 3)
            continue
        if not chosen:
            chosen = True
            if p == _CUDA:
                device = f"cuda:{int((opts or {}).get('device_id', 0))}"
    return device


def _warn_ignored(options):
    known = ("session.", "ep.", "optimization.", "mlas.", "kernel.")
    for key in options._config:
        if not key.startswith(known):
            warnings.warn(f"keel: unknown session config entry '{key}' is ignored", RuntimeWarning, 3)


class InferenceSession:
    """InferenceSession(path_or_bytes, sess_options=None, providers=None,
    provider_options=None): ONNX Runtime's session over keel."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError("sess_options must be a keel.SessionOptions, got "
                            f"{type(sess_options).__name__}")
        for k in kwargs:   # ONNX Runtime ignores the keywords it does not read
            warnings.warn(f"keel: InferenceSession keyword '{k}' is ignored", RuntimeWarning, 2)
        self._device = _check_providers(providers, provider_options)
        self._options = sess_options if sess_options is not None else SessionOptions()
        _warn_ignored(self._options)
        o = self._options
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            model = path_or_bytes
            self._model_path = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            model = os.fspath(path_or_bytes)
            self._model_path = model
            if not os.path.exists(model):
                raise _keel.FileError(f"Load model from {model} failed: File doesn't exist")
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        if o.mem_limit < 0:
            raise _keel.InvalidArgument(f"mem_limit must be >= 0, got {o.mem_limit}")
        self._model_src = model
        self._sess = self._create()
        self._inputs = [NodeArg(d) for d in self._sess.inputs()]
        self._outputs = [NodeArg(d) for d in self._sess.outputs()]
        self._profiling = bool(o.enable_profiling or o.enable_mem_report)
        self._profile_start_ns = 0
        if self._profiling:
            self._sess.profile_start(memory=True, trace=bool(o.enable_profiling))
            self._profile_start_ns = int(datetime.datetime.now().timestamp() * 1e9)
        self.run = self._make_run()

    def _create(self):
        o = self._options
        return _keel.Session(self._model_src, mem_limit=o.mem_limit, log_level=o.log_severity_level,
                             threads=o.intra_op_num_threads,
                             deterministic=o.use_deterministic_compute, device=self._device)

    # --------------------------------------------------------- ORT's API
    def _make_run(self):
        run = self._sess.run

        def run_(output_names, input_feed, run_options=None):
            """run(output_names or None, {name: array}, run_options=None)
            -> list of numpy arrays (sequences as lists, empty optionals as
            None)."""
            if run_options is not None:
                if not isinstance(run_options, RunOptions):
                    raise TypeError("run_options must be a keel.RunOptions")
                if run_options.terminate:
                    raise _keel.RuntimeFailure("Exiting due to terminate flag being set to true.")
            return run(output_names, input_feed)
        return run_

    def run(self, output_names, input_feed, run_options=None):  # noqa: F811
        """run(output_names or None, {name: array}, run_options=None) ->
        list of numpy arrays. (Each session binds a faster copy of this
        in __init__; this one documents it and serves subclasses.)"""
        return self._make_run()(output_names, input_feed, run_options)

    def run_with_ort_values(self, output_names, input_feed, run_options=None):
        return self.run(output_names, input_feed, run_options)

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return [a for a in self._inputs if a.has_default]

    def get_modelmeta(self):
        return ModelMetadata(self._sess.meta())

    def get_providers(self):
        return ([_CUDA] if self._device else []) + list(_PROVIDERS)

    def get_provider_options(self):
        opts = {p: {} for p in self.get_providers()}
        if self._device:
            opts[_CUDA] = {"device_id": self._device.split(":")[1]}
        return opts

    def get_session_options(self):
        return self._options

    def get_profiling_start_time_ns(self):
        return self._profile_start_ns

    def set_providers(self, providers=None, provider_options=None):
        """As ONNX Runtime: the session is made again for the providers."""
        device = _check_providers(providers, provider_options)
        if device != self._device:
            self._device = device
            self._sess = self._create()
            self.run = self._make_run()

    def disable_fallback(self):
        pass

    def enable_fallback(self):
        pass

    def end_profiling(self):
        """Writes the Chrome trace of the runs since the session began
        (SessionOptions.enable_profiling) and returns its file name; ''
        when profiling was off, as ONNX Runtime."""
        if not self._options.enable_profiling or not self._profiling:
            return ""
        self._sess.profile_stop()
        self._profiling = False
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        with open(path, "w", encoding="utf-8") as f:
            f.write(self._sess.profile_trace())
        return path

    # ------------------------------------------------------- keel's own
    def memory_stats(self, device=None):
        """The allocator's figures under PyTorch's names
        (torch.cuda.memory_stats), plus keel's own under 'keel.': the host's,
        or with device="cuda:0" (the session's device; "cuda" alike) its
        device memory's."""
        if device is None or device == "cpu":
            return _torch_stats(self._sess.stats())
        if not self._device or str(device).split(":")[0] != self._device.split(":")[0] or \
                (":" in str(device) and str(device) != self._device):
            raise ValueError(f"keel: this session has no device {device!r} "
                             f"(it runs on {self._device or 'the CPU'})")
        return _torch_stats(self._sess.stats(device=True))

    def reset_peak_memory_stats(self):
        self._sess.reset_peaks()

    def memory_report(self, top=20):
        """The `top` nodes by bytes allocated (nodes inside loops summed
        over iterations), as dicts: path, node, op, bytes_allocated,
        n_allocs, peak_live, live_now, executions, ns. Needs per-node
        recording: SessionOptions.enable_mem_report (or enable_profiling),
        or start_memory_profile()."""
        if not isinstance(top, int) or top < 1:
            raise _keel.InvalidArgument(f"top must be a positive int, got {top!r}")
        rows = self._sess.profile_nodes()
        if not rows and not self._profiling:
            raise _keel.InvalidArgument("no per-node memory recorded: set "
                                        "SessionOptions.enable_mem_report = True "
                                        "or call start_memory_profile() before running")
        rows.sort(key=lambda r: (-r["bytes_allocated"], r["path"], r["node"]))
        return rows[:top]

    def memory_report_text(self, top=20):
        """keel run --mem-report's table."""
        return self._sess.profile_mem_report(top)

    def start_memory_profile(self):
        self._sess.profile_start(memory=True, trace=bool(self._options.enable_profiling))
        self._profiling = True

    def stop_memory_profile(self):
        self._sess.profile_stop()
        self._profiling = False

    def live_blocks(self, since=0, path_prefix=None):
        """Every live block grouped by owner, largest first: dicts with
        bytes, blocks, owner (graph path, node, value) and iteration."""
        text, _ = self._sess.live_report(since=since, path_prefix=path_prefix, json=True)
        return json.loads(text)

    def live_blocks_text(self, since=0, path_prefix=None):
        return self._sess.live_report(since=since, path_prefix=path_prefix, json=False)[0]

    def mem_mark(self):
        """A mark for live_blocks(since=...): blocks allocated from now on."""
        return self._sess.mark()

    def trim(self):
        """Gives every free segment back to the system; returns the bytes."""
        return self._sess.trim()

    def set_mem_limit(self, limit):
        self._sess.set_mem_limit(limit)

    def describe(self, as_json=False):
        """keel info's description (a dict with as_json=True)."""
        text = self._sess.describe(as_json)
        return json.loads(text) if as_json else text


def _torch_stats(st):
    """keel_stats -> torch.cuda.memory_stats() keys."""
    live_blocks = st["n_alloc"] - st["n_free"]
    d = {
        "allocated_bytes.all.current": st["allocated"],
        "allocated_bytes.all.peak": st["allocated_peak"],
        "allocated_bytes.all.allocated": st["bytes_allocated_total"],
        "allocated_bytes.all.freed": st["bytes_allocated_total"] - st["allocated"],
        "reserved_bytes.all.current": st["reserved"],
        "reserved_bytes.all.peak": st["reserved_peak"],
        "active_bytes.all.current": st["allocated"],
        "active_bytes.all.peak": st["allocated_peak"],
        "inactive_split_bytes.all.current": st["inactive_split"],
        "active_split_bytes.all.current": st["active_split"],
        "allocation.all.current": live_blocks,
        "allocation.all.allocated": st["n_alloc"],
        "allocation.all.freed": st["n_free"],
        "active.all.current": live_blocks,
        "segment.all.current": st["n_segments"],
        "segment.all.allocated": st["n_segment_alloc"],
        "segment.all.freed": st["n_segment_free"],
        "num_alloc_retries": st["n_alloc_retries"],
        "num_ooms": st["n_oom"],
        "keel.fragmentation": st["fragmentation"],
        "keel.cache_hits": st["n_cache_hit"],
        "keel.meta_bytes": st["meta_bytes"],
        "keel.mem_limit": st["mem_limit"],
    }
    return d
