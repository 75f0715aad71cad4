#!/usr/bin/env python3
"""gen_ml_tests.py: writes tests/ml/<op>_<case>/ (model.onnx,
test_data_set_0/input_K.pb, output_K.pb) for the ai.onnx.ml operators.

Models and inputs are built here with the ONNX 1.23 Python package;
expected outputs come from ONNX Runtime (onnxruntime-node), except for
cases whose inputs or outputs are maps or sequences of maps (DictVectorizer,
ZipMap), which the node binding cannot feed or read: those use onnx 1.23's
reference evaluator. tests/ml/REFERENCES lists the reference of each case.

Run:  PYTHONPATH=/work/shared/onnx-py /usr/bin/python3 tools/gen_ml_tests.py
      (NODE_PATH=/work/ort/node_modules is set for the node step.)
      ... tools/gen_ml_tests.py --big-forest OUT.onnx writes only a 100-tree,
      depth-10 TreeEnsembleRegressor (about 136k nodes) for timing:
      build/keel run OUT.onnx --iters 20
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ml")
NODE_PATH = os.environ.get("NODE_PATH", "/work/ort/node_modules")
ML = "ai.onnx.ml"
rng = np.random.default_rng(20261201)

CASES = []  # (name, model, feeds {name: ndarray}, reference)

NP2ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
           np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
           np.object_: TensorProto.STRING, np.int16: TensorProto.INT16}


def vi(name, elem, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def model(op, inputs, outputs, attrs, ml_opset=3, ai_opset=None, extra_nodes=()):
    """A one-node ai.onnx.ml model. inputs/outputs: (name, elem type, shape)."""
    node = helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], domain=ML, **attrs)
    g = helper.make_graph([node, *extra_nodes], op.lower(),
                          [vi(*i) for i in inputs], [vi(*o) for o in outputs])
    ops = [helper.make_opsetid(ML, ml_opset), helper.make_opsetid("", ai_opset or 17)]
    m = helper.make_model(g, opset_imports=ops, producer_name="keel gen_ml_tests")
    m.ir_version = 8 if ml_opset < 4 else 9
    return m


def case(name, m, feeds, ref="ort"):
    CASES.append((name, m, feeds, ref))


def rand(n, c, lo=-2.0, hi=2.0, dt=np.float32):
    return rng.uniform(lo, hi, (n, c)).astype(dt)


def grid(n, c, dt=np.float32):
    """Inputs on the trees' threshold grid (multiples of 0.5) and between it,
    so that <, <=, ==, != all see both outcomes."""
    return (rng.integers(-8, 9, (n, c)) * 0.25).astype(dt)


# ============================================================ trees

def rand_tree(depth, nfeat, p_leaf=0.25):
    """A random binary tree: list of dicts (id, feature, value, true, false, leaf)."""
    nodes = []

    def grow(d):
        i = len(nodes)
        nodes.append(None)
        if d == 0 or (d < depth and rng.random() < p_leaf):
            nodes[i] = dict(id=i, leaf=True)
            return i
        f = int(rng.integers(0, nfeat))
        v = float(rng.integers(-3, 4)) * 0.5  # on the input grid (grid()): equality hits
        nodes[i] = dict(id=i, leaf=False, feature=f, value=v)
        nodes[i]["true"] = grow(d - 1)
        nodes[i]["false"] = grow(d - 1)
        return i

    grow(depth)
    return nodes


def old_attrs(trees, n_targets, prefix, modes_pick=None, missing=False, weights_fn=None):
    a = {k: [] for k in ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                         "nodes_values", "nodes_truenodeids", "nodes_falsenodeids",
                         "nodes_missing_value_tracks_true", prefix + "_treeids",
                         prefix + "_nodeids", prefix + "_ids", prefix + "_weights"]}
    for t, nodes in enumerate(trees):
        for n in nodes:
            a["nodes_treeids"].append(t)
            a["nodes_nodeids"].append(n["id"])
            a["nodes_featureids"].append(0 if n["leaf"] else n["feature"])
            mode = "LEAF" if n["leaf"] else (modes_pick() if modes_pick else "BRANCH_LEQ")
            a["nodes_modes"].append(mode)
            a["nodes_values"].append(0.0 if n["leaf"] else n["value"])
            a["nodes_truenodeids"].append(0 if n["leaf"] else n["true"])
            a["nodes_falsenodeids"].append(0 if n["leaf"] else n["false"])
            a["nodes_missing_value_tracks_true"].append(int(missing and rng.random() < 0.5))
            if n["leaf"]:
                for tgt in (weights_fn() if weights_fn else range(n_targets)):
                    a[prefix + "_treeids"].append(t)
                    a[prefix + "_nodeids"].append(n["id"])
                    a[prefix + "_ids"].append(tgt)
                    a[prefix + "_weights"].append(float(np.float32(rng.uniform(-1, 1))))
    if not missing:
        del a["nodes_missing_value_tracks_true"]
    return a


def tree_regressor_cases():
    F = 4
    for agg in ["SUM", "AVERAGE", "MIN", "MAX"]:
        trees = [rand_tree(3, F) for _ in range(3)]
        a = old_attrs(trees, 2, "target")
        m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", TensorProto.FLOAT, [None, 2])],
                  dict(n_targets=2, aggregate_function=agg, base_values=[0.5, -0.25], **a), ml_opset=1)
        case(f"tree_regressor_{agg.lower()}", m, {"X": grid(6, F)})
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    trees = [rand_tree(4, F) for _ in range(2)]
    a = old_attrs(trees, 1, "target", modes_pick=lambda: modes[int(rng.integers(0, 6))])
    x = grid(12, F)
    m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.FLOAT, [None, 1])], dict(n_targets=1, **a), ml_opset=1)
    case("tree_regressor_modes", m, {"X": x})
    trees = [rand_tree(3, F) for _ in range(2)]
    a = old_attrs(trees, 1, "target", missing=True)
    x = grid(6, F)
    x[::2, 1] = np.nan
    x[1::2, 2] = np.nan
    m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.FLOAT, [None, 1])], dict(n_targets=1, base_values=[1.5], **a), ml_opset=1)
    case("tree_regressor_missing", m, {"X": x})
    for post in ["SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"]:
        trees = [rand_tree(3, F) for _ in range(2)]
        a = old_attrs(trees, 3, "target")
        m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", TensorProto.FLOAT, [None, 3])], dict(n_targets=3, post_transform=post, **a), ml_opset=1)
        case(f"tree_regressor_{post.lower()}", m, {"X": grid(5, F)})
    # leaves weighting one of three targets, base values: targets no leaf reached
    for agg in ["SUM", "MAX"]:
        trees = [rand_tree(2, F) for _ in range(2)]
        a = old_attrs(trees, 3, "target", weights_fn=lambda: [int(rng.integers(0, 3))])
        m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", TensorProto.FLOAT, [None, 3])],
                  dict(n_targets=3, aggregate_function=agg, base_values=[1.0, 2.0, 3.0], **a), ml_opset=1)
        case(f"tree_regressor_sparse_targets_{agg.lower()}", m, {"X": grid(8, F)})
    # probit on one target (scores kept inside (0, 1))
    trees = [rand_tree(3, F) for _ in range(2)]
    a = old_attrs(trees, 1, "target")
    a["target_weights"] = [w * 0.2 for w in a["target_weights"]]
    m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.FLOAT, [None, 1])],
              dict(n_targets=1, post_transform="PROBIT", base_values=[0.5], **a), ml_opset=1)
    case("tree_regressor_probit", m, {"X": grid(6, F)})
    # opset 3: double input, values and weights as tensors
    trees = [rand_tree(3, F) for _ in range(2)]
    a = old_attrs(trees, 1, "target")
    vals = a.pop("nodes_values")
    w = a.pop("target_weights")
    a["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(vals, np.float64), "v")
    a["target_weights_as_tensor"] = numpy_helper.from_array(np.array(w, np.float64), "w")
    m = model("TreeEnsembleRegressor", [("X", TensorProto.DOUBLE, [None, F])],
              [("Y", TensorProto.FLOAT, [None, 1])], dict(n_targets=1, aggregate_function="AVERAGE", **a),
              ml_opset=3)
    case("tree_regressor_double_tensors", m, {"X": grid(5, F, dt=np.float64)})
    # the opset-3 op in a model that imports ai.onnx.ml 4 (LabelEncoder-4 beside it)
    trees = [rand_tree(3, F) for _ in range(2)]
    m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.FLOAT, [None, 1])], dict(n_targets=1, **old_attrs(trees, 1, "target")),
              ml_opset=4)
    case("tree_regressor_ml_opset4", m, {"X": grid(5, F)})


def tree_classifier_cases():
    F = 3
    for post, labels in [("NONE", "ints"), ("SOFTMAX", "strings"), ("LOGISTIC", "ints"),
                         ("SOFTMAX_ZERO", "ints")]:
        trees = [rand_tree(3, F) for _ in range(3)]
        a = old_attrs(trees, 3, "class")
        lab = dict(classlabels_int64s=[4, 7, 9]) if labels == "ints" else dict(
            classlabels_strings=["cat", "dog", "eel"])
        ye = TensorProto.INT64 if labels == "ints" else TensorProto.STRING
        m = model("TreeEnsembleClassifier", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", ye, [None]), ("Z", TensorProto.FLOAT, [None, 3])],
                  dict(post_transform=post, base_values=[0.1, -0.2, 0.05], **lab, **a), ml_opset=1)
        case(f"tree_classifier_{post.lower()}_{labels}", m, {"X": grid(6, F)})
    # binary, one score column (class id 0), as sklearn's gradient boosting writes
    for post in ["NONE", "LOGISTIC"]:
        trees = [rand_tree(3, F) for _ in range(3)]
        a = old_attrs(trees, 1, "class")
        m = model("TreeEnsembleClassifier", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", TensorProto.INT64, [None]), ("Z", TensorProto.FLOAT, [None, 2])],
                  dict(post_transform=post, base_values=[0.3], classlabels_int64s=[0, 1], **a), ml_opset=1)
        case(f"tree_classifier_binary_{post.lower()}", m, {"X": grid(8, F)})
    # binary, one score column, two base values
    trees = [rand_tree(3, F) for _ in range(2)]
    a = old_attrs(trees, 1, "class")
    m = model("TreeEnsembleClassifier", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.INT64, [None]), ("Z", TensorProto.FLOAT, [None, 2])],
              dict(base_values=[0.2, 0.2], classlabels_int64s=[0, 1], **a), ml_opset=1)
    case("tree_classifier_binary_base2", m, {"X": grid(8, F)})
    # binary with positive weights (probabilities), no base values
    trees = [rand_tree(3, F) for _ in range(2)]
    a = old_attrs(trees, 1, "class")
    a["class_weights"] = [abs(w) / 2 for w in a["class_weights"]]
    m = model("TreeEnsembleClassifier", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.STRING, [None]), ("Z", TensorProto.FLOAT, [None, 2])],
              dict(classlabels_strings=["no", "yes"], **a), ml_opset=1)
    case("tree_classifier_binary_positive", m, {"X": grid(8, F)})
    # random-forest style: both classes weighted, averaged over trees... as SUM of 1/n
    trees = [rand_tree(3, F) for _ in range(4)]
    a = old_attrs(trees, 3, "class")
    a["class_weights"] = [abs(w) / 4 for w in a["class_weights"]]
    m = model("TreeEnsembleClassifier", [("X", TensorProto.DOUBLE, [None, F])],
              [("Y", TensorProto.INT64, [None]), ("Z", TensorProto.FLOAT, [None, 3])],
              dict(classlabels_int64s=[0, 1, 2], **a), ml_opset=1)
    case("tree_classifier_forest_double", m, {"X": grid(7, F, dt=np.float64)})


def new_attrs(trees, n_targets, member=False):
    """TreeEnsemble-5 attributes from rand_tree trees (one weight per leaf)."""
    a = dict(nodes_featureids=[], nodes_splits=[], nodes_modes=[], nodes_truenodeids=[],
             nodes_falsenodeids=[], nodes_trueleafs=[], nodes_falseleafs=[], leaf_targetids=[],
             leaf_weights=[], tree_roots=[], membership_values=[])
    for nodes in trees:
        node_ix, leaf_ix = {}, {}
        for n in nodes:
            if n["leaf"]:
                leaf_ix[n["id"]] = len(a["leaf_weights"])
                a["leaf_targetids"].append(int(rng.integers(0, n_targets)))
                a["leaf_weights"].append(float(rng.uniform(-1, 1)))
            else:
                node_ix[n["id"]] = len(a["nodes_featureids"])
                a["nodes_featureids"].append(n["feature"])
                a["nodes_splits"].append(n["value"])
                mode = 6 if member and rng.random() < 0.5 else int(rng.integers(0, 4))
                a["nodes_modes"].append(mode)
                if mode == 6:
                    a["membership_values"] += [float(v) for v in rng.integers(-2, 3, 2)] + [np.nan]
                a["nodes_truenodeids"].append(n["true"])
                a["nodes_falsenodeids"].append(n["false"])
        a["tree_roots"].append(node_ix[0])
        base = len(a["nodes_featureids"]) - len(node_ix)
        for n in nodes:
            if n["leaf"]:
                continue
            i = node_ix[n["id"]]
            for side in ("true", "false"):
                c = n[side]
                isleaf = nodes[c]["leaf"]
                a[f"nodes_{side}nodeids"][i] = leaf_ix[c] if isleaf else node_ix[c]
                a[f"nodes_{side}leafs"].append(None)
        del base
    # the leaf flags, in node order
    a["nodes_trueleafs"], a["nodes_falseleafs"] = [], []
    for nodes in trees:
        for n in nodes:
            if not n["leaf"]:
                a["nodes_trueleafs"].append(int(nodes[n["true"]]["leaf"]))
                a["nodes_falseleafs"].append(int(nodes[n["false"]]["leaf"]))
    return a


def ref_te5_post(m, feeds):
    (name, y), = run_reference("", m, feeds)
    post = [a.i for a in m.graph.node[0].attribute if a.name == "post_transform"][0]
    y = y.astype(np.float64)
    if post == 1:
        e = np.exp(y - y.max(axis=1, keepdims=True))
        y = e / e.sum(axis=1, keepdims=True)
    elif post == 2:
        y = 1.0 / (1.0 + np.exp(-y))
    else:
        raise ValueError(post)
    return [(name, y.astype(feeds["X"].dtype))]


ref_te5_post.label = "onnx 1.23 onnx.reference + the spec's post_transform"


def tree_ensemble_cases():
    F = 3
    for agg, post, dt, member in [(1, 0, np.float32, False), (0, 0, np.float64, False),
                                  (2, 0, np.float32, True), (3, 0, np.float32, True),
                                  (1, 1, np.float32, False), (1, 2, np.float32, False)]:
        trees = [rand_tree(3, F, p_leaf=0.0) for _ in range(3)]
        a = new_attrs(trees, 2, member)
        et = NP2ONNX[dt]
        attrs = dict(n_targets=2, aggregate_function=agg, post_transform=post,
                     nodes_featureids=a["nodes_featureids"], nodes_truenodeids=a["nodes_truenodeids"],
                     nodes_falsenodeids=a["nodes_falsenodeids"], nodes_trueleafs=a["nodes_trueleafs"],
                     nodes_falseleafs=a["nodes_falseleafs"], leaf_targetids=a["leaf_targetids"],
                     tree_roots=a["tree_roots"],
                     nodes_splits=numpy_helper.from_array(np.array(a["nodes_splits"], dt), "s"),
                     nodes_modes=numpy_helper.from_array(np.array(a["nodes_modes"], np.uint8), "m"),
                     leaf_weights=numpy_helper.from_array(np.array(a["leaf_weights"], dt), "w"))
        if a["membership_values"]:
            attrs["membership_values"] = numpy_helper.from_array(np.array(a["membership_values"], dt), "mv")
        m = model("TreeEnsemble", [("X", et, [None, F])], [("Y", et, [None, 2])], attrs, ml_opset=5,
                  ai_opset=21)
        x = rng.integers(-2, 3, (8, F)).astype(dt) if member else grid(8, F, dt=dt)
        name = ["average", "sum", "min", "max"][agg] + ("_member" if member else "") + \
            ("_" + ["none", "softmax", "logistic"][post] if post else "") + ("_double" if dt == np.float64 else "")
        # ONNX Runtime 1.30 reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (its
        # own enum order); the spec says 1 = SOFTMAX, 2 = LOGISTIC. These cases take
        # the reference evaluator's raw scores (it ignores post_transform) and apply
        # the spec's transform.
        case(f"tree_ensemble_{name}", m, {"X": x}, ref_te5_post if post else "ort")


# ============================================================ linear, SVM

def linear_cases():
    F = 4
    for t, post in [(1, "NONE"), (3, "NONE"), (3, "SOFTMAX"), (2, "LOGISTIC")]:
        coef = rng.uniform(-1, 1, t * F).astype(np.float32).tolist()
        m = model("LinearRegressor", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, t])],
                  dict(coefficients=coef, intercepts=rng.uniform(-1, 1, t).tolist(), targets=t,
                       post_transform=post), ml_opset=1)
        case(f"linear_regressor_t{t}_{post.lower()}", m, {"X": rand(5, F)})
    m = model("LinearClassifier", [("X", TensorProto.INT64, [None, F])],
              [("Y", TensorProto.INT64, [None]), ("Z", TensorProto.FLOAT, [None, 3])],
              dict(coefficients=rng.uniform(-1, 1, 3 * F).tolist(), intercepts=[0.1, 0.2, 0.3],
                   classlabels_ints=[1, 2, 3]), ml_opset=1)
    case("linear_classifier_int64_input", m, {"X": rng.integers(-5, 5, (4, F)).astype(np.int64)})
    for k, post, lab in [(3, "NONE", "ints"), (3, "SOFTMAX", "strings"), (3, "LOGISTIC", "ints"),
                         (1, "NONE", "ints"), (1, "LOGISTIC", "strings")]:
        nl = 2 if k == 1 else k
        labels = dict(classlabels_ints=list(range(10, 10 + nl))) if lab == "ints" else dict(
            classlabels_strings=[f"c{i}" for i in range(nl)])
        ye = TensorProto.INT64 if lab == "ints" else TensorProto.STRING
        m = model("LinearClassifier", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", ye, [None]), ("Z", TensorProto.FLOAT, [None, nl])],
                  dict(coefficients=rng.uniform(-1, 1, k * F).tolist(), intercepts=rng.uniform(-1, 1, k).tolist(),
                       post_transform=post, **labels), ml_opset=1)
        case(f"linear_classifier_{'binary' if k == 1 else 'multi'}_{post.lower()}_{lab}", m, {"X": rand(6, F)})


KP = {"LINEAR": [0.0, 0.0, 0.0], "POLY": [0.3, 0.5, 3.0], "RBF": [0.4, 0.0, 0.0], "SIGMOID": [0.2, 0.1, 0.0]}


def svm_cases():
    F = 3
    for kern in ["LINEAR", "POLY", "RBF", "SIGMOID"]:
        nsv = 5
        m = model("SVMRegressor", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, 1])],
                  dict(kernel_type=kern, kernel_params=KP[kern], n_supports=nsv,
                       support_vectors=rng.uniform(-1, 1, nsv * F).tolist(),
                       coefficients=rng.uniform(-1, 1, nsv).tolist(), rho=[0.25]), ml_opset=1)
        case(f"svm_regressor_{kern.lower()}", m, {"X": rand(6, F)})
    m = model("SVMRegressor", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, 1])],
              dict(coefficients=rng.uniform(-1, 1, F).tolist(), rho=[0.1], kernel_params=KP["LINEAR"]),
              ml_opset=1)
    case("svm_regressor_linear_mode", m, {"X": rand(6, F)})
    m = model("SVMRegressor", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, 1])],
              dict(kernel_type="RBF", kernel_params=KP["RBF"], n_supports=4, one_class=1,
                   support_vectors=rng.uniform(-1, 1, 4 * F).tolist(),
                   coefficients=rng.uniform(-1, 1, 4).tolist(), rho=[0.05]), ml_opset=1)
    case("svm_regressor_one_class", m, {"X": rand(6, F)})
    for kern, kc, proba, lab in [("RBF", 3, False, "ints"), ("RBF", 3, True, "ints"), ("POLY", 3, True, "strings"),
                                 ("SIGMOID", 4, False, "strings"), ("LINEAR", 2, False, "ints"),
                                 ("RBF", 2, True, "ints")]:
        vpc = [int(v) for v in rng.integers(1, 4, kc)]
        nv = sum(vpc)
        npairs = kc * (kc - 1) // 2
        attrs = dict(kernel_type=kern, kernel_params=KP[kern], vectors_per_class=vpc,
                     support_vectors=rng.uniform(-1, 1, nv * F).tolist(),
                     coefficients=rng.uniform(-1, 1, (kc - 1) * nv).tolist(),
                     rho=rng.uniform(-0.5, 0.5, npairs).tolist())
        if proba:
            attrs["prob_a"] = rng.uniform(-3, -1, npairs).tolist()
            attrs["prob_b"] = rng.uniform(-0.2, 0.2, npairs).tolist()
        if lab == "ints":
            attrs["classlabels_ints"] = list(range(kc))
        else:
            attrs["classlabels_strings"] = [f"k{i}" for i in range(kc)]
        zc = kc if proba else (npairs if kc > 2 else 2)
        ye = TensorProto.INT64 if lab == "ints" else TensorProto.STRING
        m = model("SVMClassifier", [("X", TensorProto.FLOAT, [None, F])],
                  [("Y", ye, [None]), ("Z", TensorProto.FLOAT, [None, zc])], attrs, ml_opset=1)
        case(f"svm_classifier_{kern.lower()}_{kc}{'_proba' if proba else ''}_{lab}", m, {"X": rand(7, F)})
    m = model("SVMClassifier", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.INT64, [None]), ("Z", TensorProto.FLOAT, [None, 3])],
              dict(coefficients=rng.uniform(-1, 1, 3 * F).tolist(), rho=[0.2], classlabels_ints=[1, 2, 3],
                   kernel_params=KP["LINEAR"]),
              ml_opset=1)
    case("svm_classifier_linear_mode", m, {"X": rand(6, F)})
    m = model("SVMClassifier", [("X", TensorProto.FLOAT, [None, F])],
              [("Y", TensorProto.STRING, [None]), ("Z", TensorProto.FLOAT, [None, 2])],
              dict(coefficients=rng.uniform(-1, 1, 2 * F).tolist(), rho=[0.1], classlabels_strings=["n", "p"],
                   kernel_params=KP["LINEAR"], post_transform="LOGISTIC"), ml_opset=1)
    case("svm_classifier_linear_mode_binary_logistic", m, {"X": rand(6, F)})


# ============================================================ misc

def misc_cases():
    F = 4
    m = model("Binarizer", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
              dict(threshold=0.3), ml_opset=1)
    case("binarizer_float", m, {"X": rand(3, F)})
    m = model("Binarizer", [("X", TensorProto.FLOAT, [None])], [("Y", TensorProto.FLOAT, [None])], {},
              ml_opset=1)
    case("binarizer_default_threshold", m, {"X": rng.uniform(-1, 1, 7).astype(np.float32)})
    for off, sc in [([0.5], [2.0]), (rng.uniform(-1, 1, F).tolist(), rng.uniform(0.5, 2, F).tolist())]:
        m = model("Scaler", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
                  dict(offset=off, scale=sc), ml_opset=1)
        case(f"scaler_{'scalar' if len(off) == 1 else 'per_column'}", m, {"X": rand(3, F)})
    m = model("Scaler", [("X", TensorProto.INT64, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
              dict(offset=[1.0] * F, scale=[0.5] * F), ml_opset=1)
    case("scaler_int64", m, {"X": rng.integers(-9, 9, (3, F)).astype(np.int64)})
    for norm in ["MAX", "L1", "L2"]:
        m = model("Normalizer", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
                  dict(norm=norm), ml_opset=1)
        case(f"normalizer_{norm.lower()}", m, {"X": rand(4, F, 0.1, 2.0)})
    m = model("OneHotEncoder", [("X", TensorProto.INT64, [None, 2])], [("Y", TensorProto.FLOAT, [None, 2, 4])],
              dict(cats_int64s=[3, 1, 7, 5]), ml_opset=1)
    case("one_hot_encoder_int64", m, {"X": np.array([[1, 7], [5, 2], [3, 3]], np.int64)})
    m = model("OneHotEncoder", [("X", TensorProto.STRING, [None])], [("Y", TensorProto.FLOAT, [None, 3])],
              dict(cats_strings=["red", "green", "blue"]), ml_opset=1)
    case("one_hot_encoder_string", m, {"X": np.array(["green", "blue", "pink", "red"], object)})
    m = model("OneHotEncoder", [("X", TensorProto.DOUBLE, [None])], [("Y", TensorProto.FLOAT, [None, 3])],
              dict(cats_int64s=[0, 2, 4]), ml_opset=1)
    case("one_hot_encoder_double", m, {"X": np.array([2.0, 4.0, 0.0, 1.0], np.float64)})
    m = model("Imputer", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
              dict(imputed_value_floats=[1.0, 2.0, 3.0, 4.0], replaced_value_float=float("nan")), ml_opset=1)
    x = rand(4, F)
    x[0, 1] = x[2, 3] = x[3, 0] = np.nan
    case("imputer_nan", m, {"X": x})
    m = model("Imputer", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, F])],
              dict(imputed_value_floats=[9.0], replaced_value_float=0.0), ml_opset=1)
    x = rand(3, F)
    x[1, 2] = x[0, 0] = 0.0
    case("imputer_value", m, {"X": x})
    m = model("Imputer", [("X", TensorProto.INT64, [None, 3])], [("Y", TensorProto.INT64, [None, 3])],
              dict(imputed_value_int64s=[7, 8, 9], replaced_value_int64=-1), ml_opset=1)
    case("imputer_int64", m, {"X": np.array([[1, -1, 3], [-1, 5, -1]], np.int64)})
    m = model("ArrayFeatureExtractor", [("X", TensorProto.FLOAT, [None, 5]), ("I", TensorProto.INT64, [None])],
              [("Y", TensorProto.FLOAT, None)], {}, ml_opset=1)
    case("array_feature_extractor_float", m, {"X": rand(3, 5), "I": np.array([4, 0, 2], np.int64)})
    m = model("ArrayFeatureExtractor", [("X", TensorProto.STRING, [None, 3]), ("I", TensorProto.INT64, [None])],
              [("Y", TensorProto.STRING, None)], {}, ml_opset=1)
    case("array_feature_extractor_string", m,
         {"X": np.array([["a", "b", "c"], ["d", "e", "f"]], object), "I": np.array([2, 2, 1], np.int64)})
    m = model("FeatureVectorizer", [("A", TensorProto.FLOAT, [None, 2]), ("B", TensorProto.FLOAT, [None, 3]),
                                    ("C", TensorProto.FLOAT, [None, 1])],
              [("Y", TensorProto.FLOAT, [None, 6])], dict(inputdimensions=[2, 3, 1]), ml_opset=1)
    case("feature_vectorizer", m, {"A": rand(3, 2), "B": rand(3, 3), "C": rand(3, 1)})
    m = model("FeatureVectorizer", [("A", TensorProto.INT64, [None, 3]), ("B", TensorProto.INT64, [None, 1])],
              [("Y", TensorProto.FLOAT, [None, 4])], dict(inputdimensions=[2, 2]), ml_opset=1)
    case("feature_vectorizer_int64_pad_truncate", m, {"A": rng.integers(0, 9, (3, 3)).astype(np.int64),
                                                     "B": rng.integers(0, 9, (3, 1)).astype(np.int64)})
    cm = dict(cats_strings=["a", "b", "c"], cats_int64s=[10, 20, 30])
    m = model("CategoryMapper", [("X", TensorProto.STRING, [None])], [("Y", TensorProto.INT64, [None])],
              dict(default_int64=-7, **cm), ml_opset=1)
    case("category_mapper_to_int", m, {"X": np.array(["c", "z", "a", "b"], object)})
    m = model("CategoryMapper", [("X", TensorProto.INT64, [None])], [("Y", TensorProto.STRING, [None])],
              dict(default_string="none", **cm), ml_opset=1)
    case("category_mapper_to_string", m, {"X": np.array([20, 5, 10, 30], np.int64)})
    label_encoder_cases()


def label_encoder_cases():
    m = model("LabelEncoder", [("X", TensorProto.STRING, [None])], [("Y", TensorProto.INT64, [None])],
              dict(classes_strings=["x", "y", "z"], default_int64=99), ml_opset=1)
    case("label_encoder_v1_string_int", m, {"X": np.array(["z", "q", "x"], object)})
    m = model("LabelEncoder", [("X", TensorProto.INT64, [None])], [("Y", TensorProto.STRING, [None])],
              dict(classes_strings=["x", "y", "z"], default_string="?"), ml_opset=1)
    case("label_encoder_v1_int_string", m, {"X": np.array([2, 0, 5, 1], np.int64)})
    m = model("LabelEncoder", [("X", TensorProto.INT64, [None])], [("Y", TensorProto.FLOAT, [None])],
              dict(keys_int64s=[5, 1, 3], values_floats=[0.5, 1.5, 2.5], default_float=-1.0), ml_opset=2)
    case("label_encoder_v2_int_float", m, {"X": np.array([3, 4, 5, 1], np.int64)})
    m = model("LabelEncoder", [("X", TensorProto.FLOAT, [None])], [("Y", TensorProto.STRING, [None])],
              dict(keys_floats=[0.5, -1.0, 2.0], values_strings=["h", "m", "t"]), ml_opset=2)
    case("label_encoder_v2_float_string", m, {"X": np.array([2.0, 0.5, 7.0, -1.0], np.float32)})
    m = model("LabelEncoder", [("X", TensorProto.STRING, [None, 2])], [("Y", TensorProto.STRING, [None, 2])],
              dict(keys_strings=["a", "b"], values_strings=["A", "B"], default_string="-"), ml_opset=2)
    case("label_encoder_v2_string_string", m, {"X": np.array([["a", "c"], ["b", "a"]], object)})
    m = model("LabelEncoder", [("X", TensorProto.INT64, [None])], [("Y", TensorProto.DOUBLE, [None])],
              dict(keys_tensor=numpy_helper.from_array(np.array([1, 2, 3], np.int64), "k"),
                   values_tensor=numpy_helper.from_array(np.array([0.25, 0.5, 0.75], np.float64), "v"),
                   default_tensor=numpy_helper.from_array(np.array([-2.0], np.float64), "d")), ml_opset=4)
    case("label_encoder_v4_tensor_int_double", m, {"X": np.array([3, 9, 1], np.int64)})
    m = model("LabelEncoder", [("X", TensorProto.FLOAT, [None])], [("Y", TensorProto.INT64, [None])],
              dict(keys_tensor=numpy_helper.from_array(np.array([1.5, np.nan], np.float32), "k"),
                   values_tensor=numpy_helper.from_array(np.array([4, 8], np.int64), "v"),
                   default_tensor=numpy_helper.from_array(np.array([-1], np.int64), "d")), ml_opset=4)
    case("label_encoder_v4_nan_key", m, {"X": np.array([np.nan, 1.5, 2.0], np.float32)})


# ============================================================ maps

def map_vi(name, key, value):
    return helper.make_value_info(name, helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, [])))


def seq_map_vi(name, key, value):
    return helper.make_value_info(name, helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, []))))


def map_model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "maps", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(ML, 1), helper.make_opsetid("", 17)],
                          producer_name="keel gen_ml_tests")
    m.ir_version = 8
    return m


def zip_rows(labels, x):
    return [dict(zip(labels, (np.float32(v) for v in row))) for row in x]


def zip_labels(node):
    a = {x.name: x for x in node.attribute}
    if "classlabels_strings" in a:
        return [s.decode() for s in a["classlabels_strings"].strings]
    return list(a["classlabels_int64s"].ints)


def ref_zipmap(m, feeds):
    """ZipMap as the spec defines it (one map per row: label -> score). Neither
    onnxruntime-node (no non-tensor outputs) nor onnx.reference (no ZipMap) can
    produce it; a model whose ZipMap follows another op runs that op in ONNX
    Runtime and zips its output here."""
    zm = [n for n in m.graph.node if n.op_type == "ZipMap"][0]
    if len(m.graph.node) == 1:
        return [(m.graph.output[0].name, zip_rows(zip_labels(zm), feeds[zm.input[0]]))]
    sub = onnx.ModelProto()
    sub.CopyFrom(m)
    sub.graph.node.remove([n for n in sub.graph.node if n.op_type == "ZipMap"][0])
    del sub.graph.output[:]
    prod = sub.graph.node[0]
    sub.graph.output.extend([vi(prod.output[0], TensorProto.STRING, None), vi(prod.output[1], TensorProto.FLOAT, None)])
    with tempfile.TemporaryDirectory() as tmp:
        (_, label), (_, prob) = run_ort([("sub", sub, feeds, "ort")], tmp)["sub"]
    return [(m.graph.output[0].name, label), (m.graph.output[1].name, zip_rows(zip_labels(zm), prob))]


ref_zipmap.label = "ZipMap per the ONNX spec, in the generator (other ops: onnxruntime-node 1.30)"


NP_OF_ONNX = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.INT64: np.int64}


def ref_dict_vectorizer(m, feeds):
    (name, y), = run_reference("", m, feeds)
    dt = NP_OF_ONNX[m.graph.output[0].type.tensor_type.elem_type]
    return [(m.graph.output[0].name, np.asarray(y).astype(dt).reshape(1, -1))]


ref_dict_vectorizer.label = ("onnx 1.23 onnx.reference values, as [1, V] of the map's value type "
                             "(ONNX Runtime's shape; the reference gives [V] and float64)")


def map_cases():
    for key, labels in [("strings", ["a", "b", "c"]), ("int64s", [10, 20, 30])]:
        kt = TensorProto.STRING if key == "strings" else TensorProto.INT64
        node = helper.make_node("ZipMap", ["X"], ["Z"], domain=ML, **{f"classlabels_{key}": labels})
        m = map_model([node], [vi("X", TensorProto.FLOAT, [None, 3])], [seq_map_vi("Z", kt, TensorProto.FLOAT)])
        case(f"zipmap_{key}", m, {"X": rand(4, 3, 0, 1)}, ref_zipmap)
    # a classifier's probabilities as sklearn-onnx hands them out
    lc = helper.make_node("LinearClassifier", ["X"], ["label", "prob"], domain=ML,
                          coefficients=rng.uniform(-1, 1, 12).tolist(), intercepts=[0.1, -0.2, 0.3],
                          classlabels_strings=["setosa", "versicolor", "virginica"], post_transform="SOFTMAX")
    zm = helper.make_node("ZipMap", ["prob"], ["probabilities"], domain=ML,
                          classlabels_strings=["setosa", "versicolor", "virginica"])
    m = map_model([lc, zm], [vi("X", TensorProto.FLOAT, [None, 4])],
                  [vi("label", TensorProto.STRING, [None]), seq_map_vi("probabilities", TensorProto.STRING,
                                                                        TensorProto.FLOAT)])
    case("zipmap_after_linear_classifier", m, {"X": rand(5, 4)}, ref_zipmap)
    for kt, vt, vocab, feed in [
            (TensorProto.STRING, TensorProto.FLOAT, dict(string_vocabulary=["x", "y", "z", "w"]),
             {"x": np.float32(1.5), "w": np.float32(-2.0), "q": np.float32(9.0)}),
            (TensorProto.INT64, TensorProto.DOUBLE, dict(int64_vocabulary=[3, 1, 4, 15, 9]),
             {4: 0.25, 9: 7.5, 2: 1.0}),
            (TensorProto.STRING, TensorProto.INT64, dict(string_vocabulary=["b", "a"]),
             {"a": np.int64(3), "b": np.int64(-4)})]:
        node = helper.make_node("DictVectorizer", ["X"], ["Y"], domain=ML, **vocab)
        nv = len(next(iter(vocab.values())))
        m = map_model([node], [map_vi("X", kt, vt)], [vi("Y", vt, [1, nv])])
        kn = "string" if kt == TensorProto.STRING else "int64"
        vn = {TensorProto.FLOAT: "float", TensorProto.DOUBLE: "double", TensorProto.INT64: "int64"}[vt]
        case(f"dict_vectorizer_{kn}_{vn}", m, {"X": feed}, ref_dict_vectorizer)


def map_proto(d, name=None):
    keys = list(d.keys())
    mp = onnx.MapProto()
    if name:
        mp.name = name
    if isinstance(keys[0], str):
        mp.key_type = TensorProto.STRING
        mp.string_keys.extend(k.encode() for k in keys)
    else:
        mp.key_type = TensorProto.INT64
        mp.keys.extend(int(k) for k in keys)
    vals = [numpy_helper.from_array(np.array(v)) for v in d.values()]
    mp.values.CopyFrom(helper.make_sequence("", onnx.SequenceProto.TENSOR, vals))
    return mp


def value_pb(val, name):
    if isinstance(val, dict):
        return map_proto(val, name)
    if isinstance(val, list):  # a sequence of maps
        sp = onnx.SequenceProto(name=name, elem_type=onnx.SequenceProto.MAP)
        sp.map_values.extend(map_proto(d) for d in val)
        return sp
    return numpy_helper.from_array(np.asarray(val), name)


# ============================================================ writing

def write_case(name, m, feeds, outs):
    d = os.path.join(ROOT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(m, os.path.join(d, "model.onnx"))
    for i, inp in enumerate(m.graph.input):
        t = value_pb(feeds[inp.name], inp.name)
        open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb").write(t.SerializeToString())
    for i, (oname, val) in enumerate(outs):
        pb = value_pb(val, oname)
        open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb").write(pb.SerializeToString())


NODE_SCRIPT = r"""
const ort = require('onnxruntime-node');
const fs = require('fs');
const jobs = JSON.parse(fs.readFileSync(process.argv[2]));
const T = {float32: Float32Array, float64: Float64Array, int32: Int32Array, int16: Int16Array,
           int64: BigInt64Array, string: Array};
(async () => {
  const res = {};
  for (const j of jobs) {
    try {
      const s = await ort.InferenceSession.create(j.model);
      const feeds = {};
      for (const [n, f] of Object.entries(j.feeds)) {
        const data = f.type === 'int64' ? BigInt64Array.from(f.data.map(BigInt))
                   : f.type === 'string' ? f.data : T[f.type].from(f.data.map(v => v === null ? NaN : v));
        feeds[n] = new ort.Tensor(f.type, data, f.dims);
      }
      const out = await s.run(feeds);
      res[j.name] = s.outputNames.map(n => ({name: n, type: out[n].type, dims: out[n].dims,
        data: Array.from(out[n].data, v => typeof v === 'bigint' ? v.toString() : (Number.isNaN(v) ? 'nan' : v))}));
    } catch (e) { res[j.name] = {error: String(e)}; }
  }
  fs.writeFileSync(process.argv[3], JSON.stringify(res));
})();
"""

NP_OF = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int16": np.int16,
         "int64": np.int64, "string": object}


def run_ort(cases, tmp):
    jobs = []
    for name, m, feeds, _ in cases:
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(m, path)
        fj = {}
        for k, v in feeds.items():
            t = "string" if v.dtype == object else str(v.dtype)
            data = [None if (isinstance(x, float) and np.isnan(x)) else x for x in v.ravel().tolist()]
            fj[k] = dict(type=t, dims=list(v.shape), data=data)
        jobs.append(dict(name=name, model=path, feeds=fj))
    jp, rp = os.path.join(tmp, "jobs.json"), os.path.join(tmp, "res.json")
    json.dump(jobs, open(jp, "w"))
    sp = os.path.join(tmp, "run.js")
    open(sp, "w").write(NODE_SCRIPT)
    subprocess.run(["node", sp, jp, rp], check=True, env=dict(os.environ, NODE_PATH=NODE_PATH))
    res = json.load(open(rp))
    out = {}
    for name, *_ in cases:
        r = res[name]
        if isinstance(r, dict):
            sys.exit(f"{name}: ONNX Runtime failed: {r['error']}")
        vals = []
        for o in r:
            dt = NP_OF[o["type"]]
            data = [float("nan") if v == "nan" else v for v in o["data"]]
            if dt == np.int64:
                data = [int(v) for v in data]
            vals.append((o["name"], np.array(data, dtype=dt).reshape(o["dims"])))
        out[name] = vals
    return out


def run_reference(name, m, feeds):
    from onnx.reference import ReferenceEvaluator
    res = ReferenceEvaluator(m).run(None, feeds)
    return [(o.name, r) for o, r in zip(m.graph.output, res)]


def main():
    tree_regressor_cases()
    tree_classifier_cases()
    tree_ensemble_cases()
    linear_cases()
    svm_cases()
    misc_cases()
    map_cases()
    os.makedirs(ROOT, exist_ok=True)
    ort_cases = [c for c in CASES if c[3] == "ort"]
    with tempfile.TemporaryDirectory() as tmp:
        ort_out = run_ort(ort_cases, tmp)
    refs = []
    for name, m, feeds, ref in CASES:
        outs = ort_out[name] if ref == "ort" else run_reference(name, m, feeds) if ref == "onnx.reference" \
            else ref(m, feeds)
        write_case(name, m, feeds, outs)
        label = {"ort": "onnxruntime-node 1.30", "onnx.reference": "onnx 1.23 onnx.reference"}.get(ref) \
            if isinstance(ref, str) else ref.label
        refs.append(f"{name}: {label}")
    open(os.path.join(ROOT, "REFERENCES"), "w").write("\n".join(refs) + "\n")
    print(f"{len(CASES)} cases in {ROOT}")


def big_forest(path):
    F = 20
    trees = [rand_tree(10, F, p_leaf=0.05) for _ in range(100)]
    a = old_attrs(trees, 1, "target")
    m = model("TreeEnsembleRegressor", [("X", TensorProto.FLOAT, [None, F])], [("Y", TensorProto.FLOAT, [None, 1])],
              dict(n_targets=1, **a), ml_opset=1)
    onnx.save(m, path)
    print(f"{len(a['nodes_nodeids'])} nodes in {path}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if len(sys.argv) == 3 and sys.argv[1] == "--big-forest":
        big_forest(sys.argv[2])
    else:
        main()
