#!/usr/bin/env python3
"""Check that comments and documents name only source files that exist.

A comment that names a file (engine/grads.c, stage3.c, scripts/test.sh)
tells the reader where to look; once the file is moved or renamed it
sends them nowhere. This check reads the comments of the C, CUDA, Python,
shell and CMake files and the whole text of the Markdown documents, finds
every name of a source file (.c .h .cu .cuh .py .sh), and fails on one
that no file of the tree bears:
  - a path with folders must exist from the repository root, from the
    naming file's folder, or as the tail of a path in the tree
    ("checkpoint/ef.c" for engine/checkpoint/ef.c);
  - a bare name must be some file's name.
Names inside quotes or angle brackets (strings, system headers) and in
URLs are not read. Files of other projects that the comments cite on
purpose are listed in EXTERNAL, each with its reason.

Usage: check_names.py [repository root]   (exit 1 and one line per stale name)
"""
import os
import re
import sys

SKIP_DIRS = {".git", ".venv", "__pycache__", "node_modules"}
NAME = re.compile(r"(?<![\w./:<\"'@-])((?:[\w.-]+/)*[A-Za-z_][\w-]*\.(?:c|h|cu|cuh|py|sh))"
                  r"(?![\w/\">])(?!'(?!s\b))")

# names of other projects' files, cited on purpose
EXTERNAL = {
    "a.c": "cmake/ZincTesting.cmake's usage line: a placeholder source name",
    "nvml.h": "NVIDIA's NVML header, not shipped with zinc (device_cuda_nvml.c)",
    "llm.c": "the llm.c project (karpathy/llm.c), the style model",
    "engine.py": "DeepSpeed's runtime/engine.py",
    "stage_1_and_2.py": "DeepSpeed's runtime/zero/stage_1_and_2.py",
    "adam.py": "DeepSpeed's runtime/fp16/onebit/adam.py",
    "zoadam.py": "DeepSpeed's runtime/fp16/onebit/zoadam.py",
    "lamb.py": "DeepSpeed's runtime/fp16/onebit/lamb.py",
    "monitor/config.py": "DeepSpeed's monitor/config.py",
    "comm/config.py": "DeepSpeed's comm/config.py",
    "runtime/config.py": "DeepSpeed's runtime/config.py",
    "runtime/comm/nccl.py": "DeepSpeed's runtime/comm/nccl.py",
    "integrations/deepspeed.py": "transformers' integrations/deepspeed.py",
    "cblas.h": "OpenBLAS's CBLAS header, opened at run time by bench/ds_peer (not a build dependency)",
}
# paths under these folders are other projects' (DeepSpeed's package)
EXTERNAL_ROOTS = ("deepspeed/",)


def tree(root):
    files = []
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for n in sorted(names):
            files.append(os.path.relpath(os.path.join(dirpath, n), root))
    return files


def comments(path, text):
    """(line, text) of each comment of a source file; a document is one."""
    ext = os.path.splitext(path)[1]
    if ext in (".c", ".h", ".cu", ".cuh"):
        i, n = 0, len(text)
        while i < n:
            if text.startswith("/*", i):
                j = text.find("*/", i + 2)
                j = n if j < 0 else j
                yield text.count("\n", 0, i) + 1, text[i:j]
                i = j + 2
            elif text.startswith("//", i):
                j = text.find("\n", i)
                j = n if j < 0 else j
                yield text.count("\n", 0, i) + 1, text[i:j]
                i = j
            elif text[i] in "\"'":
                q, j = text[i], i + 1
                while j < n and text[j] != q and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
            else:
                i += 1
    elif ext in (".py", ".sh", ".cmake") or os.path.basename(path) == "CMakeLists.txt":
        for k, line in enumerate(text.split("\n"), 1):
            m = re.search(r"(?:^|\s)#(?!include|!)(.*)$", line)
            if m:
                yield k, m.group(1)
        if ext == ".py":
            for m in re.finditer(r'"""(.*?)"""', text, re.S):
                yield text.count("\n", 0, m.start()) + 1, m.group(1)
    elif ext == ".md":
        yield 1, text


def check(root):
    files = tree(root)
    paths = set(files)
    names = {os.path.basename(f) for f in files}

    def exists(name, where):
        if name in EXTERNAL or name.startswith(EXTERNAL_ROOTS):
            return True
        if name in paths or os.path.normpath(os.path.join(os.path.dirname(where), name)) in paths:
            return True
        if "/" not in name:
            return name in names
        return any(f.endswith("/" + name) for f in files)

    bad = []
    for f in files:
        if not re.search(r"\.(c|h|cu|cuh|py|sh|cmake|md)$", f) and \
           os.path.basename(f) != "CMakeLists.txt":
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for line, comment in comments(f, text):
            for m in NAME.finditer(comment):
                name = m.group(1)
                word = comment[:m.start()].rsplit(None, 1)[-1:] or [""]
                if "://" in word[0]:
                    continue
                if not exists(name, f):
                    bad.append(f"{f}:{line + comment.count(chr(10), 0, m.start())}: "
                               f"names {name}, which is no file of the tree")
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = check(os.path.abspath(root))
    for line in bad:
        print(line)
    if bad:
        print(f"check_names: {len(bad)} name(s) of files that do not exist: name the file as it "
              "is now, or add another project's file to EXTERNAL with its reason "
              "(scripts/check_names.py)")
        return 1
    print("check_names: every file a comment or document names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
