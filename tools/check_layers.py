#!/usr/bin/env python3
"""Checks that includes inside src/ point only downward.

The rooms of src/ form one order, top to bottom (README, "The house"):

    cli > train > exec > dist > passes > autodiff > ops > onnx > ir
        > tensor > device > mem > base

A file may include a header of its own room or of a room below it, and
the public headers of include/. Inside ops/, the shared part (kernel.h,
registry.h, families.h and ops/common/) includes no family's header.

    tools/check_layers.py [--root DIR]   check DIR/src (default: the repository)
    tools/check_layers.py --self-test    check the checker on planted trees

Exit status: 0 clean, 1 a violation (each printed as file:line), 2 usage.
"""
import os
import re
import sys
import tempfile

ORDER = ["cli", "train", "exec", "dist", "passes", "autodiff", "ops", "onnx", "ir",
         "tensor", "device", "mem", "base"]
RANK = {room: i for i, room in enumerate(ORDER)}
OPS_SHARED = {"kernel.h", "kernel.c", "registry.h", "registry.c", "families.h", "common"}
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')
SOURCES = (".c", ".h", ".cc", ".cu", ".cuh")


def ops_part(path_in_ops):
    """'common', 'kernel.h', ... for the shared part; a family's folder name otherwise."""
    return path_in_ops.split("/", 1)[0]


def violations(root):
    """Yields (file, line, include, why) for every include that points the wrong way."""
    src = os.path.join(root, "src")
    if not os.path.isdir(src):
        raise SystemExit(f"check_layers: {src}: no such folder")
    for dirpath, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            room = rel.split("/", 1)[0]
            if room not in RANK:
                yield rel, 0, "", f"room '{room}' is not in the order ({' > '.join(ORDER)})"
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for line_no, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    if "/" not in inc:  # include/ (public) or a file beside it
                        continue
                    if inc.startswith("../"):
                        yield rel, line_no, inc, "names its header relative to itself, not from src/"
                        continue
                    target = inc.split("/", 1)[0]
                    if target not in RANK:
                        continue  # a system or third-party header
                    if RANK[target] < RANK[room]:
                        yield rel, line_no, inc, f"{room} includes {target}, a room above it"
                    elif room == "ops" and target == "ops":
                        mine = ops_part(rel[len("ops/"):])
                        theirs = ops_part(inc[len("ops/"):])
                        if mine in OPS_SHARED and theirs not in OPS_SHARED:
                            yield rel, line_no, inc, f"ops' shared part includes the family '{theirs}'"


def check(root):
    found = list(violations(root))
    for rel, line_no, inc, why in found:
        print(f"src/{rel}:{line_no}: #include \"{inc}\": {why}")
    return 1 if found else 0


def self_test():
    """Plants trees with and without violations; the checker must tell them apart."""
    cases = [  # (files, expected violation count)
        ({"base/a.c": '#include "base/a.h"\n#include "keel.h"\n',
          "exec/b.c": '#include "ops/kernel.h"\n#include "base/a.h"\n#include <stdio.h>\n',
          "ops/nn/c.c": '#include "ops/common/bcast.h"\n#include "ops/math/m.h"\n'}, 0),
        ({"base/a.c": '#include "exec/exec.h"\n'}, 1),
        ({"ops/x.c": '  #  include "train/train.h"\n'}, 1),
        ({"mem/alloc.c": '#include "device/cuda.h"\n', "ir/p.c": '#include "passes/pass.h"\n'}, 2),
        ({"ops/common/v.c": '#include "ops/nn/conv/c.h"\n', "ops/kernel.c": '#include "ops/math/m.h"\n'}, 2),
        ({"exec/r.c": '#include "../ops/kernel.h"\n'}, 1),
        ({"gpu/k.c": '#include "base/a.h"\n'}, 1),
    ]
    failed = 0
    for i, (files, want) in enumerate(cases):
        with tempfile.TemporaryDirectory() as tmp:
            for rel, text in files.items():
                path = os.path.join(tmp, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
            got = len(list(violations(tmp)))
        status = "ok" if got == want else "FAILED"
        failed += got != want
        print(f"case {i}: {want} violation(s) planted, {got} found: {status}")
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) == 1:
        return check(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if len(argv) == 3 and argv[1] == "--root":
        return check(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
