#!/usr/bin/env python3
"""Differential check of zinc's Hjson reader against the reference (hjson 3.1.0).

For every input -- the config corpus (tests/config/valid, invalid, hjson),
variants of each corpus file written the way people hand-edit configs
(commas dropped at line ends, trailing commas, comments, quotes dropped from
simple keys), and a list of tricky snippets -- both readers must agree: the
same value (dict/list structure, strings, and int vs float) or both refuse.
Duplicate keys are refused by both, as DeepSpeed refuses them.

Constructs left open at the end of the text (UNCLOSED, and the corpus files
hjson/invalid_unclosed_*) must be refused by both, zinc at the line and
column where the construct opens. The reference refuses an unclosed block
comment or ''' string by indexing past the end of the text (an IndexError,
not an HjsonDecodeError): for these inputs any exception is its refusal.

Usage: hjson_check.py HJSON_DUMP SOURCE_DIR   (exit 0 agree, 1 disagree,
77 SKIPPED when no Python with the hjson package is found)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

# this folder holds the corpus folder "hjson/", which must not shadow the package
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
try:
    import hjson
    hjson.loads  # a namespace package of the same name has no loads
except (ImportError, AttributeError):
    print("SKIPPED: the hjson package (PyPI, the reference implementation) is not "
          "installed; scripts/setup.sh puts it in .venv")
    sys.exit(77)

SNIPPETS = [
    '{a: 1, b: 2}', '{a: 1\nb: 2}', 'a: 1\nb: [1, 2,]\n', '{"a": [1 2 3]}', '{a: [1\n2\n3]}',
    '{a: hello world}', '{a: hello, world\nb: 1}', '{a: 1 # c\n}', '{a: 1 // c\n}',
    '{a: 1 /* c */, b: 2}', '{a: true\nb: false\nc: null}', '{a: true1}', '{a: 01}',
    '{a: -0}', '{a: -}', '{a: 1.}', '{a: .5}', '{a: 1e5}', '{a: 1E-5, b: 2e+3}',
    '{a: 12345678901234567890}', "{a: 'x'}", "{a: 'it''s'}", "{a: 'x\\'y'}",
    '{a: "\\u00e9\\n"}', '{a: "\\ud83d\\ude00"}', "{a:\n  '''\n  one\n    two\n  '''\n}",
    "{a: '''x'''}", "{a: '''\n''' }", '{"a b": 1}', '{a b: 1}', '{a : 1}', '{: 1}',
    '{a: 1}}', '{a: {b: {c: []}}}', '[1, 2]', '3', '"s"', '', '# only a comment\n',
    '{a: 1, a: 2}', '{a: {x: 1}, b: {x: 1, x: 2}}', '{a: "x"', '{a: [1, 2}', '{a: b: c}',
    '{a: [true, false, null, nothing]}', '{a: 1,,}', '{a: ,}', '{a: 1\n,b: 2}',
    '{\n  "x": "auto",\n  y: auto\n}', '{a: 5e7, b: 4.5e7, c: 1e-8}', '{a: 15099494.4}',
    '{a: ${MAX_LR}}', '{a: "${X}"}', '{a: 1 }', '{a: [1 ]}', '{a: [a b, c]}',
    '{a: 1}\n# trailing comment', '{a: "tab\there"}', '{a: x /* not a comment end',
    # a byte order mark is skipped; a line that fails as a root object is one
    # quoteless string (the config refuses it: not an object)
    '\ufeff{"a": 1}', '\ufeffa: 1\nb: [2]', '\ufeff// c\n{a: 1}', 'a: {b: 1', "a: '''x\n",
    '{a: "x /* y */"}', "{a: 'x // y'}", '{a: 1 /* c */}', '{a: 1} /* c */', '/**/{a: 1}',
]

# (text, line, column): one construct left open, and where it opens.
UNCLOSED = [
    ('/* tuned for 8 nodes\n{"train_micro_batch_size_per_gpu": 4, "zero_optimization": '
     '{"stage": 3}}', 1, 1),
    ('/* tuned for 8 nodes', 1, 1), ('  /* x\n\n', 1, 3), ('/*/', 1, 1), ('/*', 1, 1),
    ('{"a": 1}\n/* trailing', 2, 1), ('a: 1\n/* rest\nb: 2\n', 2, 1),
    ('{a: 1 /* x\n}', 1, 7), ('a: 1 /* x\n', 1, 6), ('[1, 2 /* x', 1, 7),
    ('{a: [1, /* x\n2]}', 1, 9), ('{a: /* x', 1, 5), ('{"a" /* x', 1, 6),
    ('{a: "x}', 1, 5), ("{a: 'x}", 1, 5), ('{a: "x\\', 1, 5), ("{a: 'x\\", 1, 5),
    ('{"a: 1}', 1, 2), ("{'a: 1}", 1, 2), ("{a: '''x}", 1, 5), ("{\n  a: '''\n  x\n}", 2, 6),
    ("a: 1\nb: '''x\n", 2, 4),
    ('{a: [1, 2', 1, 5), ('{a: {b: 1}', 1, 1), ('{a: 1', 1, 1), ('[1, [2]', 1, 1),
    ('a: {b: 1\nc: 2', 1, 4), ('a: 1\nb: [1,\n2', 2, 4),
]


def load_reference(text):
    def pairs(items):
        seen = {}
        for k, v in items:
            if k in seen:
                raise ValueError("duplicate key %r" % k)
            seen[k] = v
        return seen
    return hjson.loads(text, object_pairs_hook=pairs)


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        big = isinstance(a, int) and abs(a) >= 2 ** 63  # beyond int64: a real in C
        return (type(a) is type(b) or big) and float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def variants(text):
    """The same file as people hand-edit it."""
    yield text
    yield re.sub(r",[ \t]*\n", "\n", text)                        # commas dropped at line ends
    yield re.sub(r"([}\]\"0-9el])[ \t]*\n([ \t]*[}\]])", r"\1,\n\2", text)  # trailing commas
    yield re.sub(r"\n", "  # note\n", text, count=3)               # comments at line ends
    yield re.sub(r'"([A-Za-z_][A-Za-z0-9_]*)"[ \t]*:', r"\1:", text)  # quoteless keys
    yield "// header\n" + text


def main():
    dump, src = sys.argv[1], sys.argv[2]
    inputs = []
    for sub in ("valid", "invalid", "hjson"):
        d = os.path.join(src, "tests", "config", sub)
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), encoding="utf-8") as f:
                text = f.read()
            for i, v in enumerate(variants(text)):
                inputs.append(("%s/%s#%d" % (sub, name, i), v))
    inputs += [("snippet %d %r" % (i, s), s) for i, s in enumerate(SNIPPETS)]
    unclosed = {name for name, _ in inputs if name.startswith("hjson/invalid_unclosed")}
    where = {}
    for i, (s, line, column) in enumerate(UNCLOSED):
        name = "unclosed %d %r" % (i, s)
        inputs.append((name, s))
        unclosed.add(name)
        where[name] = "ERROR line %d column %d:" % (line, column)
    bad = crashes = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "in.hjson")
        for name, text in inputs:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            out = subprocess.run([dump, path], capture_output=True, text=True).stdout.strip()
            try:
                ref, ref_err = load_reference(text), None
            except (hjson.HjsonDecodeError, ValueError) as e:  # the reference refuses it
                ref, ref_err = None, e
            except Exception as e:
                if name not in unclosed:  # the reference crashes: no verdict to compare with
                    crashes += 1
                    print("REFERENCE CRASH %s: %s: %s; zinc: %s" % (name, type(e).__name__, e,
                                                                     out[:120]))
                    continue
                ref, ref_err = None, e  # its refusal of an unclosed comment or ''' string
            if name in where and not out.startswith(where[name]):
                bad += 1
                print("WHERE %s: zinc %s, expected %s (where the construct opens)"
                      % (name, out[:200], where[name]))
                continue
            if out.startswith("ERROR"):
                if ref_err is None:
                    bad += 1
                    print("DIFF %s: zinc refuses it (%s), the reference reads %s"
                          % (name, out, json.dumps(ref)[:200]))
                continue
            mine = json.loads(out)
            if ref_err is not None:
                bad += 1
                print("DIFF %s: zinc reads %s, the reference refuses it (%s)"
                      % (name, out[:200], ref_err))
            elif not same(ref, mine):
                bad += 1
                print("DIFF %s: zinc %s\n    reference %s" % (name, out[:300],
                                                              json.dumps(ref)[:300]))
    print("hjson_check: %d inputs, %d disagreements with hjson %s (%d inputs crash the "
          "reference and are not compared)" % (len(inputs), bad, hjson.__version__, crashes))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
