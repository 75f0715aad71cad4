#!/usr/bin/env /usr/bin/python3
"""Writes the training references of issue 11 (`keel train` against
PyTorch): for each model of tests/train/models.py

  tests/train/<name>/model.onnx        exported untrained, loss output "loss"
  tests/train/<name>/data_K/input_J.pb batches (graph-input order, data only)
  tests/train/<name>/args              the `keel train` flags, one per line
  tests/train/<name>/expected.json     per-step losses, branch taken, margins,
                                       each batch's loss at the initial and at
                                       the trained weights
  tests/train/<name>/expected_params.npz  final parameters by initializer name
  tests/train/<name>/expected_step1.npz   the parameters after step 1 (check.py
                                       uses them to say which gradient is off)
  tests/train/OPS.md                   every op of the four graphs

PyTorch trains the same module from the same initial weights on the same
batches (cycling through them, as `keel train` does) with the optimizer the
args name. The same run in float64 measures how well-conditioned each
reference is: expected.json records how much of check.py's tolerance the
float32-vs-float64 difference already uses.

Run: /usr/bin/python3 tests/train/gen.py [NAME...]   (python3-torch 1.13,
python3-onnx 1.12, numpy; deterministic). With the ONNX 1.23 reference
evaluator at ../shared/onnx-py it also checks that the exported graphs
compute PyTorch's loss on every batch, before and after training.
"""
import copy
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from models import MODELS, keel_flags, make_optimizer  # noqa: E402

OPSET = 17
FLOAT = onnx.TensorProto.FLOAT
REF_PY = os.path.normpath(os.path.join(ROOT, "..", "..", "shared", "onnx-py"))
if not os.path.isdir(REF_PY):
    REF_PY = "/work/shared/onnx-py"


def export(spec, module, batch, path):
    """Untrained export; returns the loaded ONNX model."""
    mod = torch.jit.script(module) if spec["script"] else module
    torch.onnx.export(mod, batch, path, opset_version=OPSET, do_constant_folding=False,
                      input_names=spec["inputs"], output_names=["loss"],
                      dynamic_axes=spec["dynamic"])
    model = onnx.load(path)
    onnx.checker.check_model(model)
    got = [i.name for i in model.graph.input]
    if got != spec["inputs"]:
        raise SystemExit(f"{path}: graph inputs {got}, expected the data inputs {spec['inputs']}")
    return model


def match_initializers(model, module):
    """Maps every float initializer to the torch parameter it holds:
    {onnx_name: (torch_name, transposed)}. Names usually match state_dict
    names; an initializer under another name (onnx::MatMul_N) is matched by
    value, also transposed. Returns (mapping, unmatched float initializers)."""
    params = {k: v.detach().numpy() for k, v in module.named_parameters()}
    mapping, unmatched = {}, []
    for init in model.graph.initializer:
        if init.data_type != FLOAT:
            continue
        arr = numpy_helper.to_array(init)
        if init.name in params and params[init.name].shape == arr.shape:
            if not np.array_equal(params[init.name], arr):
                raise SystemExit(f"initializer {init.name} differs from the parameter")
            mapping[init.name] = (init.name, False)
            continue
        cands = [(k, False) for k, v in params.items()
                 if v.shape == arr.shape and np.array_equal(v, arr)]
        cands += [(k, True) for k, v in params.items()
                  if v.ndim == 2 and v.T.shape == arr.shape and np.array_equal(v.T, arr)]
        if len(cands) == 1:
            mapping[init.name] = cands[0]
        elif cands:
            raise SystemExit(f"initializer {init.name} matches several parameters {cands}")
        else:
            unmatched.append(init.name)
    held = [t for t, _ in mapping.values()]
    for k in params:
        if held.count(k) != 1:
            raise SystemExit(f"parameter {k} is held by {held.count(k)} initializers "
                             "(merged or duplicated by the exporter): the ONNX graph would "
                             "not train like the module")
    return mapping, unmatched


def write_batches(d, spec, batches):
    for k, batch in enumerate(batches):
        folder = os.path.join(d, f"data_{k}")
        os.makedirs(folder, exist_ok=True)
        for j, (t, nm) in enumerate(zip(batch, spec["inputs"])):
            with open(os.path.join(folder, f"input_{j}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), nm).SerializeToString())


def train(spec, init_state, batches, dtype):
    """PyTorch training: returns per-step losses and final parameters."""
    module = spec["cls"]()
    module.load_state_dict(init_state)
    module = module.to(dtype)
    opt = make_optimizer(spec["optimizer"], spec["hyper"], module.parameters())
    losses, first = [], None
    torch.set_default_dtype(dtype)  # torch.zeros inside forward
    for step in range(spec["steps"]):
        batch = batches[step % len(batches)]
        batch = [b.to(dtype) if b.is_floating_point() else b for b in batch]
        opt.zero_grad(set_to_none=True)
        loss = module(*batch)
        loss.backward()
        opt.step()  # parameters of a branch not taken have .grad None: skipped
        losses.append(float(loss))
        if step == 0:
            first = {k: v.detach().to(torch.float64).numpy().copy()
                     for k, v in module.named_parameters()}
    torch.set_default_dtype(torch.float32)
    train.after_step1 = first
    return losses, {k: v.detach().to(torch.float64).numpy()
                    for k, v in module.named_parameters()}


def save_npz(path, arrays):
    """np.savez, but byte-for-byte reproducible (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with z.open(info, "w") as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arrays[name]))


def in_onnx_layout(mapping, params):
    return {o: (params[t].T if tr else params[t]) for o, (t, tr) in mapping.items()}


def margins(l32, l64, p32, p64):
    """The fraction of check.py's tolerances that float32-vs-float64 uses."""
    lm = max(abs(a - b) / (1e-3 * abs(b)) for a, b in zip(l32, l64))
    pm = max(float(np.max(np.abs(p32[k] - p64[k]) / (1e-4 + 1e-3 * np.abs(p64[k]))))
             for k in p32)
    return lm, pm


def write_args(d, name, spec, unmatched):
    flags = ["--loss", "loss"] + keel_flags(spec["optimizer"], spec["hyper"])
    flags += ["--steps", str(spec["steps"])]
    if unmatched:
        flags += ["--freeze", ",".join(unmatched)]
    lines = [" ".join(flags[i:i + 2]) for i in range(0, len(flags), 2)]
    lines += [f"--data tests/train/{name}/data_{k}" for k in range(spec["nbatches"])]
    with open(os.path.join(d, "args"), "w") as f:
        f.write("\n".join(lines) + "\n")


def forward_losses(spec, state, batches):
    module = spec["cls"]()
    module.load_state_dict(state)
    with torch.no_grad():
        return [float(module(*b)) for b in batches]


def trained_state(init_state, params):
    state = copy.deepcopy(init_state)
    for k, v in params.items():
        state[k] = torch.from_numpy(v.astype(np.float32))
    return state


def reference_check(name, d, spec, init_state, final_params, mapping, batches):
    """The ONNX 1.23 reference evaluator runs the exported graph on every
    batch with the initial and with the trained parameters; both must give
    PyTorch's forward loss (rtol 1e-4)."""
    if not os.path.isdir(REF_PY):
        print(f"  {name}: no {REF_PY}: reference-evaluator check skipped")
        return None
    final_state = trained_state(init_state, final_params)
    want0 = forward_losses(spec, init_state, batches)
    want1 = forward_losses(spec, final_state, batches)
    trained = in_onnx_layout(mapping, {k: v.astype(np.float32) for k, v in final_params.items()})
    np.savez(os.path.join(d, ".trained.npz"), **trained)
    env = dict(os.environ, PYTHONPATH=REF_PY)
    out = subprocess.run([sys.executable, os.path.join(HERE, "ref_eval.py"), d,
                          str(spec["nbatches"])], env=env, capture_output=True, text=True)
    os.remove(os.path.join(d, ".trained.npz"))
    if out.returncode != 0:
        raise SystemExit(f"{name}: reference evaluator failed:\n{out.stderr[-3000:]}")
    got = json.loads(out.stdout)
    worst = 0.0
    for want, key in [(want0, "initial"), (want1, "trained")]:
        for k, (a, b) in enumerate(zip(got[key], want)):
            rel = abs(a - b) / abs(b)
            worst = max(worst, rel)
            if rel > 1e-4:
                raise SystemExit(f"{name}: batch {k} ({key} weights): ONNX reference loss {a}"
                                 f" vs PyTorch {b}")
    print(f"  {name}: ONNX reference evaluator = PyTorch forward on all {len(batches)} batches"
          f" (initial and trained weights), worst rel {worst:.1e}")
    return worst


def gen(name):
    spec = MODELS[name]
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(spec["seed"])
    module = spec["cls"]()
    init_state = copy.deepcopy(module.state_dict())
    batches = spec["batches"](torch.Generator().manual_seed(spec["seed"] + 100),
                              spec["nbatches"])
    model = export(spec, copy.deepcopy(module), batches[0], os.path.join(d, "model.onnx"))
    mapping, unmatched = match_initializers(model, module)
    write_batches(d, spec, batches)
    l32, p32 = train(spec, init_state, batches, torch.float32)
    step1 = in_onnx_layout(mapping, {k: v.astype(np.float32)
                                     for k, v in train.after_step1.items()})
    save_npz(os.path.join(d, "expected_step1.npz"), step1)
    l64, p64 = train(spec, init_state, batches, torch.float64)
    lm, pm = margins(l32, l64, p32, p64)
    expected = in_onnx_layout(mapping, {k: v.astype(np.float32) for k, v in p32.items()})
    save_npz(os.path.join(d, "expected_params.npz"), expected)
    write_args(d, name, spec, unmatched)
    steps = spec["steps"]
    branch = None
    if spec["branch"]:
        branch = [spec["branch"](*batches[s % len(batches)])[0] for s in range(steps)]
    ref = reference_check(name, d, spec, init_state, p32, mapping, batches)
    info = {
        "model": name, "opset": OPSET, "optimizer": spec["optimizer"], "hyper": spec["hyper"],
        "steps": steps, "batches": spec["nbatches"], "losses": l32,
        "forward_losses": forward_losses(spec, init_state, batches),
        "trained_forward_losses": forward_losses(spec, trained_state(init_state, p32), batches),
        "params": "expected_params.npz",
        "params_after_step1": "expected_step1.npz",
        "param_names": {o: {"torch": t, "transposed": tr} for o, (t, tr) in mapping.items()},
        "frozen": unmatched,
        "batch_shapes": [[list(t.shape) for t in b] for b in batches],
        "branch_per_step": branch,
        "tolerance": {"loss_rtol": 1e-3, "param_atol": 1e-4, "param_rtol": 1e-3},
        "float64_margin": {"loss": lm, "params": pm,
                           "note": "max |float32 - float64| of PyTorch's own run, as a "
                                   "fraction of the tolerance"},
        "onnx_reference_forward_rel": ref,
    }
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(r, x)) for r, _, fs in os.walk(d) for x in fs)
    print(f"{name}: loss {l32[0]:.6f} -> {l32[-1]:.6f} in {steps} steps, "
          f"{sum(v.size for v in expected.values())} parameters, float64 margin "
          f"loss {lm:.3f} params {pm:.3f}, {size / 1024:.0f} KB")
    if lm > 0.3 or pm > 0.3:
        print(f"  WARNING {name}: float32 vs float64 uses over 30% of the tolerance")
    return model


def main(argv):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    names = argv or list(MODELS)
    models = {n: gen(n) for n in names}
    if set(names) == set(MODELS):
        sys.path.insert(0, HERE)
        from ops_inventory import ISSUE_MODELS, write_inventory
        write_inventory({n: models[n] for n in ISSUE_MODELS}, os.path.join(HERE, "OPS.md"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
