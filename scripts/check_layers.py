#!/usr/bin/env python3
"""Check zinc's layering: no folder includes one above it.

Every include of a project header is written from the repository root
("base/base.h", "kernels/zinc_math.h"), so the folder it names is the edge
it makes. The table below is the whole set of allowed edges (docs/layout.md,
the first table); a folder may always include its own headers and the public
header "zinc.h". examples/ see only "zinc.h" and headers beside them.
tests/, bench/ and tools/ may use any internal header.

Usage: check_layers.py [repository root]   (exit 1 and one line per bad edge)
"""
import os
import re
import sys

# folder -> folders it may include (besides itself and zinc.h)
ALLOWED = {
    "base": set(),
    "config": {"base"},
    "kernels": {"base"},
    "offload": {"config", "base"},
    "comm": {"kernels", "base"},  # reductions add with zinc_math.h's casts
    "device": {"kernels", "base"},
    "optim": {"kernels", "config", "base"},
    "engine": {"comm", "device", "offload", "optim", "kernels", "config", "base"},
}
FREE = {"tests", "bench", "tools"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = re.compile(r"\.(c|h|cu|cuh)$")


def layer(path):
    """The layer a repository path belongs to: its top folder."""
    return path.split("/", 1)[0]


def check(root):
    bad = []
    for top in sorted(ALLOWED) + ["examples"]:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not SOURCE.search(name):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root)
                with open(full, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for lineno, inc in includes(text):
                    why = judge(root, rel, top, inc)
                    if why:
                        bad.append(f"{rel}:{lineno}: #include \"{inc}\": {why}")
    return bad


def includes(text):
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def judge(root, rel, top, inc):
    if inc == "zinc.h":
        return None
    if top == "examples":
        if "/" not in inc and os.path.exists(os.path.join(root, os.path.dirname(rel), inc)):
            return None
        return "examples may include only zinc.h and headers beside them"
    if "/" not in inc:
        return "write project includes from the repository root (\"base/base.h\")"
    target = layer(inc)
    if not os.path.exists(os.path.join(root, inc)):
        return "no such file under the repository root"
    if target == top:
        return None
    if target in ALLOWED.get(top, set()):
        return None
    return f"{top}/ may not include {target}/ (allowed: {', '.join(sorted(ALLOWED[top])) or 'none'})"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = check(os.path.abspath(root))
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break the layering (scripts/check_layers.py)")
        return 1
    print("check_layers: every include follows the allowed edges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
