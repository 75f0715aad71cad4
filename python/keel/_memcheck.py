"""keel.memcheck: `keel memcheck` from Python. Runs a model N times and
watches the allocator: allocated bytes must not grow after the first run.
When they do, the result names the blocks allocated since run 1 that are
still alive, by owner (graph path, node, value, iteration). With loop=NAME
it also follows that loop's iterations in every run and names blocks made
two or more iterations earlier that no running graph refers to."""
import json

import numpy as np

from . import _keel


class MemcheckResult:
    """verdict ('steady' or 'leak'), steady (bool), runs ([{'run',
    'allocated', 'reserved'}]), grew_at (first run whose allocated bytes
    exceeded run 1's, or None), leaked (live blocks since run 1, as
    live_blocks() gives them), loop_iterations (allocated bytes after each
    iteration of `loop` in the last run) and loop_leaked."""

    def __init__(self, runs, grew_at, leaked, loop, loop_iterations, loop_leaked):
        self.runs = runs
        self.grew_at = grew_at
        self.leaked = leaked
        self.loop = loop
        self.loop_iterations = loop_iterations
        self.loop_leaked = loop_leaked
        self.steady = grew_at is None and not loop_leaked
        self.verdict = "steady" if self.steady else "leak"

    def __repr__(self):
        return (f"MemcheckResult(verdict={self.verdict!r}, runs={len(self.runs)}, "
                f"grew_at={self.grew_at}, leaked={self.leaked})")


def _zeros_for(desc):
    """An input the caller did not give: zeros, symbolic dimensions 1."""
    name, _, shape, kind, optional, _, dtype = desc
    if kind == 2:
        return []
    np_dtype = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
                13: np.uint64, 14: np.complex64, 15: np.complex128}.get(dtype)
    if np_dtype is None:
        raise _keel.Unsupported(f"memcheck: cannot make input '{name}' (type code {dtype})")
    dims = [d if isinstance(d, int) else 1 for d in (shape or [])]
    return np.zeros(dims, dtype=np_dtype)


def memcheck(model, feeds=None, iters=10, loop=None, mem_limit=0, debug_plant_leak=None):
    """Runs `model` (a path or bytes) `iters` times on `feeds` (inputs not
    given are zeros) and returns a MemcheckResult. debug_plant_leak (tests
    only, as keel memcheck --debug-plant-leak) keeps a reference to every
    value of that name, to prove the verdict catches it."""
    if not isinstance(iters, int) or iters < 1:
        raise _keel.InvalidArgument(f"iters must be a positive int, got {iters!r}")
    track = {"iters": [], "leaked": []}
    holder = {}

    def on_iteration(name, it, allocated):
        if name != loop:
            return
        if it == 0:
            track["iters"] = []
        track["iters"].append(allocated)
        a = track["iters"]
        if it >= 2 and len(a) >= 3 and a[-1] > a[1]:
            text, nbytes = holder["s"].live_report(inside_node=loop, before_iteration=it - 1,
                                                   unreferenced=True)
            if nbytes:
                track["leaked"] = json.loads(text)

    s = _keel.Session(model, mem_limit=mem_limit, on_iteration=on_iteration if loop else None)
    holder["s"] = s
    if debug_plant_leak:
        s._plant_leak(debug_plant_leak)
    try:
        feed = dict(feeds or {})
        for desc in s.inputs():
            if desc[0] not in feed and not desc[5]:
                feed[desc[0]] = _zeros_for(desc)
        runs, grew_at, mark, first = [], None, 0, 0
        for i in range(1, iters + 1):
            s.run(None, feed)  # outputs dropped at once
            st = s.stats()
            runs.append({"run": i, "allocated": st["allocated"], "reserved": st["reserved"]})
            if i == 1:
                mark, first = s.mark(), st["allocated"]
            elif st["allocated"] > first and grew_at is None:
                grew_at = i
        leaked = json.loads(s.live_report(since=mark)[0]) if grew_at else []
        return MemcheckResult(runs, grew_at, leaked, loop, list(track["iters"]), track["leaked"])
    finally:
        holder.clear()
        del s
