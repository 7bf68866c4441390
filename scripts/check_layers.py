#!/usr/bin/env python3
"""Check zinc's layering: no folder includes one above it.

Every include of a project header is written from the repository root
("base/base.h", "kernels/zinc_math.h"), so the folder it names is the edge
it makes. The table below is the whole set of allowed edges (docs/layout.md,
the first table); a folder may always include its own headers and the public
header "zinc.h". examples/ see only "zinc.h" and headers beside them.
tests/, bench/ and tools/ may use any internal header.

Inside engine/ the check sees the two seams (docs/layout.md, "The
engine, file by file"): the gradient-communication methods in
engine/reduce/ and the optimizer placements in engine/place/.
  - The core (engine/'s top-level files, stage3/ and monitor/) includes
    nothing of engine/reduce/ or engine/place/ but the seam headers
    (SEAM_HEADERS). Its includes that the tables have yet to remove are
    listed in TODO, each with what it is still for; the check counts them, and
    fails on an entry that no longer occurs, so the list only shrinks.
  - A method includes the core's headers, engine/reduce/'s own headers
    and SHARED; a placement likewise with engine/place/. Neither includes
    the other seam's headers, its seam header included: what a placement
    must know of the method (or a method of the placement) it asks the
    core, which reaches the other seam through its header.
  - memory/ (the profiler and the estimator) reaches the seams through
    their headers only: the sizes are the tables' hooks.
  - checkpoint/ is a subsystem that may include anything in engine/ (the
    codec transport's error-feedback residuals are a file of its format).

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

# ------------------------------------------------------ inside engine/
CORE_DIRS = {"engine", "engine/stage3", "engine/monitor"}
# each seam's folder -> its one header the rest of the engine may include
SEAMS = {"engine/reduce": "engine/reduce/reduce.h", "engine/place": "engine/place/place.h"}
SEAM_DIRS = set(SEAMS)
SEAM_HEADERS = set(SEAMS.values())
# what a method or a placement may include besides the core and its seam
SHARED = {
    "engine/checkpoint/mstate.h": "the method-state registry methods register with",
    "engine/memory/profiler.h": "every allocation is accounted to the profiler",
}
# (file, include) edges from the core (or across the seams) to a method's or
# a placement's own header that the reducer and placement tables remove
TODO = {}
# subsystems that reach the seams through the seam headers only
THROUGH_SEAMS = {"engine/memory"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = re.compile(r"\.(c|h|cu|cuh)$")


def layer(path):
    """The layer a repository path belongs to: its top folder."""
    return path.split("/", 1)[0]


def check(root):
    bad = []
    todo_seen = set()
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
                    if not why and top == "engine":
                        why = judge_engine(rel, inc, todo_seen)
                    if why:
                        bad.append(f"{rel}:{lineno}: #include \"{inc}\": {why}")
    for rel, inc in sorted(set(TODO) - todo_seen):
        bad.append(f"{rel}: no longer includes \"{inc}\": remove it from TODO in "
                   "scripts/check_layers.py")
    return bad, len(todo_seen)


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


def judge_engine(rel, inc, todo_seen):
    """The seams inside engine/: None when the edge rel -> inc may exist."""
    if not inc.startswith("engine/"):
        return None
    src, dst = os.path.dirname(rel), os.path.dirname(inc)
    if src in THROUGH_SEAMS and dst in SEAM_DIRS and inc not in SEAM_HEADERS:
        return f"{src}/ reaches {dst}/ through {SEAMS[dst]} only (docs/layout.md)"
    if src not in CORE_DIRS | SEAM_DIRS:
        return None  # checkpoint/, memory/ (past the check above): subsystems
    if src in SEAM_DIRS and dst in SEAM_DIRS and dst != src:
        return (f"{src}/ includes nothing of {dst}/, not even {SEAMS[dst]}: it asks the "
                "core, which reaches the other seam through its header (docs/layout.md)")
    if dst not in SEAM_DIRS or inc in SEAM_HEADERS or dst == src:
        if src in SEAM_DIRS and dst not in CORE_DIRS | SEAM_DIRS and inc not in SHARED:
            return (f"{src}/ includes the core's headers, its own and "
                    f"{', '.join(sorted(SHARED))} only")
        return None
    if (rel, inc) in TODO:
        todo_seen.add((rel, inc))
        return None
    if src in SEAM_DIRS:
        return f"{src}/ reaches {dst}/ through {SEAMS[dst]} only (docs/layout.md)"
    return f"the engine's core reaches {dst}/ through {SEAMS[dst]} only (docs/layout.md)"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad, todo = check(os.path.abspath(root))
    for line in bad:
        print(line)
    if bad:
        print(f"check_layers: {len(bad)} include(s) break the layering (scripts/check_layers.py)")
        return 1
    print("check_layers: every include follows the allowed edges")
    print(f"check_layers: {todo} core include(s) of a method's or placement's own header "
          "left for the reducer and placement tables (TODO in scripts/check_layers.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
