#!/usr/bin/env /usr/bin/python3
"""Writes tests/conformance/control_flow.list: the libonnx-testdata tests
whose models hold control flow, sequences or optionals (in any sub-graph).
Run: /usr/bin/python3 tools/list_control_flow.py"""
import os

import onnx

ROOT = "/usr/share/libonnx-testdata/data"
OPS = {"If", "Loop", "Scan", "SequenceMap", "SequenceEmpty", "SequenceConstruct",
       "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength",
       "ConcatFromSequence", "SplitToSequence", "Optional", "OptionalHasElement",
       "OptionalGetElement"}


def ops(g):
    for n in g.node:
        yield n.op_type
        for a in n.attribute:
            if a.HasField("g"):
                yield from ops(a.g)
            for sg in a.graphs:
                yield from ops(sg)


def typed_like_sequence(m):
    vals = list(m.graph.input) + list(m.graph.output)
    return any(v.type.HasField("sequence_type") or v.type.HasField("optional_type") for v in vals)


def main():
    out = []
    for folder in ["node", "pytorch-converted", "pytorch-operator", "simple"]:
        for t in sorted(os.listdir(os.path.join(ROOT, folder))):
            p = os.path.join(ROOT, folder, t, "model.onnx")
            if not os.path.exists(p):
                continue
            m = onnx.load(p)
            if OPS & set(ops(m.graph)) or typed_like_sequence(m):
                out.append(f"{folder}/{t}")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "tests", "conformance", "control_flow.list"), "w") as f:
        f.write("\n".join(out) + "\n")
    print(len(out), "tests")


if __name__ == "__main__":
    main()
