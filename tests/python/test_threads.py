"""Many Python threads on one session; the GIL is released while keel runs."""
import threading
import time

import numpy as np

import keel
from conftest import ROOT, model


def test_many_threads_one_session():
    s = keel.InferenceSession(model("stateful.onnx"))
    feeds = [{"x": np.full((2, 4), t / 8, np.float32), "h": np.full((2, 8), -t / 16, np.float32)}
             for t in range(8)]
    want = [s.run(None, f) for f in feeds]
    errors, done = [], []

    def worker(t):
        try:
            for _ in range(100):
                y, h = s.run(None, feeds[t])
                if not (np.array_equal(y, want[t][0]) and np.array_equal(h, want[t][1])):
                    errors.append(f"thread {t}: wrong result")
            done.append(t)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and sorted(done) == list(range(8))


def test_control_flow_model_in_threads():
    s = keel.InferenceSession(f"{ROOT}/tests/models/nested_loop_if/model.onnx")
    feed = {"x": np.ones((2, 3), np.float32), "n": np.array(4, np.int64), "m": np.array(3, np.int64)}
    (want,) = s.run(None, feed)
    out = []
    ths = [threading.Thread(target=lambda: out.extend(s.run(None, feed)[0] for _ in range(30)))
           for _ in range(6)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    assert len(out) == 180 and all(np.array_equal(o, want) for o in out)


def test_gil_is_released_during_run():
    """A Python thread keeps counting while keel multiplies big matrices."""
    s = keel.InferenceSession(model("matmul.onnx"))
    a = np.random.default_rng(1).standard_normal((640, 640)).astype(np.float32)
    s.run(None, {"a": a, "b": a})            # warm up
    t0 = time.perf_counter()
    s.run(None, {"a": a, "b": a})
    one = time.perf_counter() - t0
    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    th = threading.Thread(target=counter)
    th.start()
    time.sleep(0.01)
    n = max(1, int(0.2 / max(one, 1e-4)))
    c0 = count[0]
    for _ in range(n):
        s.run(None, {"a": a, "b": a})
    ran = count[0] - c0
    stop.set()
    th.join()
    # with the GIL held for the whole of each run the counter would only
    # move in the switch intervals between runs
    assert ran > 1000, f"the counting thread ran only {ran} times during {n} runs"
