"""Checks keel's CUDA kernel launches against the PTX clang built, on a
machine without a GPU.

    tools/check_ptx_args.py PTX_DIR SRC_DEVICE_DIR

For every launch in src/device/cuda*.c (a `void *args[] = {...}` followed
by keel_cuda_launch with the kernel's name, or cuda.c's launch() with a
K_* code named in its k_names table), the kernel must be an entry of the
embedded PTX and take exactly as many parameters as the launch passes; a
struct passed by value must be as large in the PTX as the C struct of the
same name (both are listed: the PTX's .b8 arrays, the C structs' sizes
computed from int64_t / int32_t members). cuLaunchKernel reads one
pointer per parameter, so a missing or extra argument is memory read past
the array, which a GPU run would show only as wrong results or a crash.
Every entry of the PTX must be launched by some file.

Exit status: 0 when everything agrees, 1 with one line per mismatch.
"""
import os
import re
import sys

ENTRY = re.compile(r"\.visible \.entry (\w+)\(\s*(.*?)\)", re.S)
PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+\w+(?:\[(\d+)\])?")


def ptx_entries(ptx_dir):
    """{kernel: [(type, bytes or None), ...]} over every .ptx file."""
    out = {}
    for name in sorted(os.listdir(ptx_dir)):
        if not name.endswith(".ptx"):
            continue
        text = open(os.path.join(ptx_dir, name), encoding="utf-8").read()
        for m in ENTRY.finditer(text):
            out[m.group(1)] = [(p.group(1), int(p.group(2)) if p.group(2) else None)
                               for p in PARAM.finditer(m.group(2))]
    return out


def top_level_items(body):
    """The comma-separated items of an initializer list (no nesting in args[])."""
    return [x.strip() for x in body.split(",") if x.strip()]


def k_names(text):
    """cuda.c's enum { K_A, K_B, ... } and k_names[] = {"a", "b", ...}."""
    e = re.search(r"enum\s*\{\s*(K_\w+(?:\s*,\s*K_\w+)*)\s*\}", text)
    n = re.search(r"k_names\[K_COUNT\]\s*=\s*\{(.*?)\};", text, re.S)
    if not e or not n:
        return {}
    codes = [c.strip() for c in e.group(1).split(",") if c.strip() != "K_COUNT"]
    names = re.findall(r'"(\w+)"', n.group(1))
    return dict(zip(codes, names))


def c_struct_sizes(texts):
    """Sizes of the typedef'd geometry structs: int64_t, int32_t, int, float,
    double and uint8_t members, arrays of them (KEEL_DEV_MAX_RANK is 8) and
    structs sized before, with C's alignment and end padding."""
    widths = {"int64_t": 8, "i64": 8, "double": 8, "int32_t": 4, "int": 4, "float": 4, "uint8_t": 1}
    sizes, aligns = {}, {}
    for text in texts:
        for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \w+;", text, re.S):
            body = re.sub(r"/\*.*?\*/", "", m.group(2), flags=re.S)
            size, align, ok = 0, 1, True
            for line in body.split(";"):
                line = line.strip()
                if not line:
                    continue
                t = re.match(r"(\w+)\s+(.*)", line)
                ty = t.group(1) if t else None
                if ty in widths:
                    width, al = widths[ty], widths[ty]
                elif ty in sizes:
                    width, al = sizes[ty], aligns[ty]
                else:
                    ok = False
                    break
                for decl in t.group(2).split(","):
                    count = 1
                    for dim in re.findall(r"\[(\w+)\]", decl):
                        count *= int(dim) if dim.isdigit() else 8  # KEEL_DEV_MAX_RANK
                    size = (size + al - 1) // al * al + width * count
                    align = max(align, al)
            if ok:
                sizes[m.group(1)] = (size + align - 1) // align * align
                aligns[m.group(1)] = align
    return sizes


def launches(path, knames):
    """[(kernel, n_args, [arg names], line, text before args[])] of one file."""
    text = open(path, encoding="utf-8").read()
    out = []
    for m in re.finditer(r"void \*args\[\]\s*=\s*\{(.*?)\};", text, re.S):
        items = top_level_items(m.group(1))
        rest = text[m.end():m.end() + 600]
        name = re.search(r'keel_cuda_launch\([^;]*?"(\w+)"', rest, re.S)
        kernel = name.group(1) if name else None
        if not kernel:
            code = re.search(r"launch\(d,\s*(K_\w+)", rest)
            kernel = knames.get(code.group(1)) if code else None
        out.append((kernel, len(items), items, text[:m.start()].count("\n") + 1, text[:m.start()]))
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip())
        return 2
    ptx_dir, src = argv[1], argv[2]
    entries = ptx_entries(ptx_dir)
    files = sorted(f for f in os.listdir(src) if f.startswith("cuda") and f.endswith(".c"))
    headers = sorted(f for f in os.listdir(src) if f.endswith(".h"))
    texts = [open(os.path.join(src, f), encoding="utf-8").read() for f in headers + files]
    knames = k_names(open(os.path.join(src, "cuda.c"), encoding="utf-8").read())
    structs = c_struct_sizes(texts)
    bad, seen, structs_checked = [], set(), 0
    for f in files:
        for kernel, n, items, line, before in launches(os.path.join(src, f), knames):
            where = f"src/device/{f}:{line}"
            if not kernel:
                bad.append(f"{where}: args[] with no launch by name after it")
                continue
            seen.add(kernel)
            if kernel not in entries:
                bad.append(f"{where}: {kernel} is not an entry of the PTX")
                continue
            params = entries[kernel]
            if len(params) != n:
                bad.append(f"{where}: {kernel} takes {len(params)} parameters, the launch passes {n}")
                continue
            # a struct by value: the C variable's struct type, from its
            # nearest declaration above the launch (`<type> <var> =` or `;`)
            for (ptype, nbytes), item in zip(params, items):
                if nbytes is None:
                    continue
                var = item.lstrip("&")
                decls = list(re.finditer(r"\b(\w+)\s+" + re.escape(var) + r"\s*(?:=|;)", before))
                ctype = decls[-1].group(1) if decls else None
                if ctype not in structs:
                    bad.append(f"{where}: {kernel}'s {var} is a struct of {nbytes} bytes in the PTX; "
                               f"its C type ({ctype}) is not a struct this check can size")
                    continue
                structs_checked += 1
                if structs[ctype] != nbytes:
                    bad.append(f"{where}: {kernel}'s {var} is {nbytes} bytes in the PTX, "
                               f"{structs[ctype]} as C's {ctype}")
    for kernel in sorted(set(entries) - seen):
        bad.append(f"PTX entry {kernel} is launched nowhere in src/device/cuda*.c")
    for b in bad:
        print(b)
    print(f"check_ptx_args: {len(entries)} kernels, {len(seen)} launched, {structs_checked} structs "
          f"by value sized, {len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
