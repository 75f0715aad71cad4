"""keel's memory figures from Python: memory_stats() under PyTorch's names
(agreeing with keel_stats_get), memory_report, live_blocks, trim, the cap,
and keel.memcheck."""
import numpy as np
import pytest

import keel
from conftest import ROOT, model

NESTED = f"{ROOT}/tests/models/nested_loop_if/model.onnx"
GREEDY = f"{ROOT}/tests/models/greedy_decode/model.onnx"
TORCH_KEYS = [
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
    "reserved_bytes.all.peak", "active_bytes.all.current", "active_bytes.all.peak",
    "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms",
    "allocation.all.current", "segment.all.current", "keel.fragmentation"]


def nested_feed(n=4, m=3):
    return {"x": np.ones((2, 3), np.float32), "n": np.array(n, np.int64), "m": np.array(m, np.int64)}


def test_memory_stats_after_control_flow_agree_with_keel_stats_get():
    s = keel.InferenceSession(NESTED)
    (acc,) = s.run(None, nested_feed())           # the output stays alive
    ms, raw = s.memory_stats(), s._sess.stats()   # raw: keel_stats_get field by field
    for k in TORCH_KEYS:
        assert k in ms, k
    assert ms["allocated_bytes.all.current"] == raw["allocated"] >= acc.nbytes
    assert ms["allocated_bytes.all.peak"] == raw["allocated_peak"] >= raw["allocated"]
    assert ms["reserved_bytes.all.current"] == raw["reserved"] >= raw["allocated"]
    assert ms["reserved_bytes.all.peak"] == raw["reserved_peak"]
    assert ms["inactive_split_bytes.all.current"] == raw["inactive_split"]
    assert ms["allocation.all.current"] == raw["n_alloc"] - raw["n_free"] >= 1
    assert ms["segment.all.current"] == raw["n_segments"] >= 1
    assert ms["num_ooms"] == raw["n_oom"] == 0
    assert ms["keel.fragmentation"] == raw["fragmentation"]
    # the live blocks are exactly the allocated bytes, and belong to the output
    live = s.live_blocks()
    assert sum(b["bytes"] for b in live) == raw["allocated"]
    assert any("acc" in b["owner"] or "Loop" in b["owner"] for b in live)
    del acc
    assert s.memory_stats()["allocated_bytes.all.current"] == 0
    assert s.live_blocks() == []


def test_reset_peaks_and_trim():
    s = keel.InferenceSession(NESTED)
    s.run(None, nested_feed())
    assert s.memory_stats()["allocated_bytes.all.peak"] > 0
    s.reset_peak_memory_stats()
    assert s.memory_stats()["allocated_bytes.all.peak"] == 0
    reserved = s.memory_stats()["reserved_bytes.all.current"]
    assert reserved > 0 and s.trim() == reserved
    assert s.memory_stats()["reserved_bytes.all.current"] == 0
    s.run(None, nested_feed())                     # still usable


def test_memory_report():
    so = keel.SessionOptions()
    so.enable_mem_report = True
    s = keel.InferenceSession(NESTED, so)
    s.run(None, nested_feed())
    rows = s.memory_report(top=3)
    assert 1 <= len(rows) <= 3
    assert rows == sorted(rows, key=lambda r: -r["bytes_allocated"])
    assert set(rows[0]) >= {"path", "node", "op", "bytes_allocated", "n_allocs", "peak_live",
                            "live_now", "executions", "ns"}
    every = s.memory_report(top=1000)
    assert any(r["path"].startswith("main/Loop_1/body") and r["executions"] > 1 for r in every)
    assert "bytes" in s.memory_report_text(5) or "node" in s.memory_report_text(5)
    with pytest.raises(keel.InvalidArgument):
        keel.InferenceSession(NESTED).memory_report()
    with pytest.raises(keel.InvalidArgument):
        s.memory_report(top=0)


def test_cap_raises_out_of_memory_and_the_session_survives():
    so = keel.SessionOptions()
    so.mem_limit = 1 << 20
    s = keel.InferenceSession(model("matmul.onnx"), so)
    a = np.ones((1024, 1024), np.float32)         # c needs 4 MB
    with pytest.raises(keel.OutOfMemory, match="cap"):
        s.run(None, {"a": a, "b": a})
    ms = s.memory_stats()
    assert ms["num_ooms"] >= 1 and ms["num_alloc_retries"] >= 1
    small = np.ones((8, 8), np.float32)
    assert s.run(None, {"a": small, "b": small})[0][0, 0] == 8
    s.set_mem_limit(0)
    assert s.run(None, {"a": a, "b": a})[0].shape == (1024, 1024)


def test_live_blocks_name_a_planted_leak():
    s = keel.InferenceSession(GREEDY)
    s._sess._plant_leak("/cell/Add_2_output_0")
    feed = {"h0": np.zeros((1, 8), np.float32), "start": np.array([1], np.int64),
            "max_len": np.array(4, np.int64)}
    mark = s.mem_mark()
    s.run(None, feed)
    leaks = s.live_blocks(since=mark)
    assert leaks and any("/cell/Add_2" in b["owner"] for b in leaks)
    assert "/cell/Add_2" in s.live_blocks_text(since=mark)
    s._sess._plant_leak(None)
    del s


def test_memcheck_steady_and_per_run_figures():
    feed = {"h0": np.zeros((1, 8), np.float32), "start": np.array([1], np.int64),
            "max_len": np.array(6, np.int64)}
    r = keel.memcheck(GREEDY, feed, iters=5)
    assert r.verdict == "steady" and r.steady and r.grew_at is None
    assert [x["run"] for x in r.runs] == [1, 2, 3, 4, 5]
    assert all(x["allocated"] == r.runs[0]["allocated"] for x in r.runs)
    assert all(x["reserved"] > 0 for x in r.runs)


def test_memcheck_names_a_leak():
    feed = {"h0": np.zeros((1, 8), np.float32), "start": np.array([1], np.int64),
            "max_len": np.array(4, np.int64)}
    r = keel.memcheck(GREEDY, feed, iters=4, debug_plant_leak="/cell/Add_2_output_0")
    assert r.verdict == "leak" and not r.steady and r.grew_at == 2
    assert r.runs[-1]["allocated"] > r.runs[0]["allocated"]
    assert r.leaked and "/cell/Add_2" in r.leaked[0]["owner"]


def test_memcheck_follows_a_loop():
    r = keel.memcheck(NESTED, nested_feed(5, 4), iters=3, loop="/Loop_1")
    assert r.steady and len(r.loop_iterations) == 5
    with pytest.raises(keel.InvalidArgument):
        keel.memcheck(NESTED, iters=0)
