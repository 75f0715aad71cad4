"""Helper of gen.py: writes tests/train/OPS.md, every op (domain, opset)
the exported training graphs contain, sub-graphs included, with where each
occurs, so the derivative-rule coverage of `keel train` can be checked.

Run through gen.py, or alone: /usr/bin/python3 tests/train/ops_inventory.py
"""
import os
import sys

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ISSUE_MODELS = ["mlp_if", "rnn_loop", "cnn_branch", "transformer_lm"]


# Outputs that carry no gradient whatever their inputs: shapes, comparisons,
# indices. A node is on the gradient path when a differentiable value (one
# computed from a float initializer) reaches one of its inputs.
STOP = {"Shape", "Size", "Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual",
        "ArgMax", "ArgMin", "NonZero", "Not", "And", "Or", "ConstantOfShape", "Range"}


def subgraphs(node):
    for a in node.attribute:
        for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            yield a.name, sg


def reads(graph):
    """Every name a graph's nodes read, sub-graphs included."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for _, sg in subgraphs(node):
            names |= reads(sg)
    return names


def attrs(node):
    """The node's plain attributes as 'name=value' (no graphs, no tensors)."""
    parts = []
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, float):
            v = f"{v:g}"
        elif isinstance(v, list) and v and isinstance(v[0], (int, float)):
            v = "[" + ",".join(str(x) for x in v) + "]"
        elif not isinstance(v, (int, str)):
            continue
        parts.append(f"{a.name}={v}")
    return " ".join(parts)


def walk(graph, path, out, live):
    """Appends (op, domain, path, on_grad_path) for every node, recursing into
    sub-graphs; `live` is the set of differentiable names in scope (mutated).
    Returns which of the graph's outputs are differentiable."""
    for node in graph.node:
        hit = any(i in live for i in node.input if i)
        for an, sg in subgraphs(node):
            inner = set(live)
            if node.op_type == "Loop":
                carried = node.input[2:]
                body_in = [i.name for i in sg.input]
                flags = [c in live for c in carried]
                for _ in range(len(flags) + 1):  # fixpoint over the carried values
                    inner = set(live) | {b for b, f in zip(body_in[2:], flags) if f}
                    outs = walk(sg, "", [], set(inner))
                    new = [f or o for f, o in zip(flags, outs[1:])]
                    if new == flags:
                        break
                    flags = new
                outs = walk(sg, f"{path} > {node.op_type}({node.name}).{an}", out, inner)
                sub_hit = any(outs)
            else:
                outs = walk(sg, f"{path} > {node.op_type}({node.name}).{an}", out, inner)
                sub_hit = any(outs) or bool(reads(sg) & live)
            hit = hit or sub_hit
        grad = hit and node.op_type not in STOP
        out.append((node.op_type, node.domain or "ai.onnx", path, grad, attrs(node)))
        if grad:
            live.update(o for o in node.output if o)
    return [o.name in live for o in graph.output]


def opsets(model):
    return {(o.domain or "ai.onnx"): o.version for o in model.opset_import}


def write_inventory(models, path):
    rows = {}
    for name, model in models.items():
        ver = opsets(model)
        params = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT}
        found = []
        walk(model.graph, "main", found, set(params))
        for op, dom, where, grad, at in found:
            key = (dom, op)
            r = rows.setdefault(key, {"opset": ver.get(dom), "models": {}, "sub": set(),
                                      "grad": 0, "attrs": set()})
            if at and op != "Constant":
                r["attrs"].add(at)
            r["models"][name] = r["models"].get(name, 0) + 1
            r["grad"] += grad
            if where != "main":
                r["sub"].add(f"{name}: {where}")
    lines = ["# Ops of the training models (tests/train)", "",
             "Written by tests/train/gen.py (ops_inventory.py) from the four exported",
             "graphs: every node of the main graph and of every sub-graph (If branches,",
             "Loop bodies). `count` is the number of nodes per model; `in sub-graphs`",
             "names the sub-graphs where the op occurs. The opset is the model's",
             "import for the op's domain. `on gradient path` counts the nodes (all",
             "models) that a value computed from a float initializer reaches through",
             "differentiable ops: those need a derivative rule (Shape, comparisons,",
             "Range, ConstantOfShape stop the path; If/Loop count when a branch or body",
             "uses such a value). `attributes` lists the distinct attribute sets.", "",
             "| op | domain | opset | " + " | ".join(models)
             + " | on gradient path | attributes | in sub-graphs |",
             "|---|---|---|" + "---|" * len(models) + "---|---|---|"]
    for (dom, op), r in sorted(rows.items(), key=lambda kv: kv[0][1]):
        counts = " | ".join(str(r["models"].get(n, "")) for n in models)
        sub = "; ".join(sorted(r["sub"])) or ""
        at = "; ".join(f"`{x}`" for x in sorted(r["attrs"]))
        lines.append(f"| {op} | {dom} | {r['opset']} | {counts} | {r['grad'] or ''} | {at} "
                     f"| {sub} |")
    rule = sorted(op for (_, op), r in rows.items() if r["grad"])
    lines += ["", f"{len(rows)} distinct ops; {len(rule)} on a gradient path: "
              + ", ".join(rule) + ".", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return rows


def main():
    models = {n: onnx.load(os.path.join(HERE, n, "model.onnx")) for n in ISSUE_MODELS}
    rows = write_inventory(models, os.path.join(HERE, "OPS.md"))
    print(f"{len(rows)} ops written to tests/train/OPS.md")


if __name__ == "__main__":
    sys.exit(main())
