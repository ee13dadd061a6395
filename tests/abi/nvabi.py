#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""nvabi: compare the nv-p2p ABI declared by two or more nv-p2p.h headers.

The facts come from clang itself (clang-19 by default, $NVABI_CLANG to change):
the JSON AST gives functions, typedefs and enumerators, -fdump-record-layouts-
complete gives struct and union sizes and field offsets, -dM gives the macros.
Headers are compiled for x86_64 in kernel context without kernel headers: a
shim <linux/types.h> declares u8..u64, uint8_t..uint64_t and size_t as the
kernel does (uint64_t is u64, unsigned long long), so u64 and uint64_t compare
equal. Types are compared canonically (typedefs resolved, anonymous records
named by their place in the parent).

  nvabi.py [--json] A B [C...]
      report what differs between consecutive headers (A and B, B and C, ...)
  nvabi.py --check [--tolerated FILE] [--json] OURS DRIVER [DRIVER...]
      compare OURS with each DRIVER; differences listed in FILE (default
      tolerated.txt next to this script) are tolerated by gdrpeer

A header argument may be a file or an NVIDIA driver tree (kernel-open/nvidia/
nv-p2p.h or nvidia/nv-p2p.h under it).

Exit status: 0 no difference that matters (in --check, none that is not
tolerated), 1 differences, 2 usage or tool error.

Kinds of difference, named from the first header's side ("added" is only in
the second): function-added, function-removed, function-changed, record-added,
record-removed, record-tag (struct/union), record-size, record-align,
field-added, field-removed,
field-offset, field-type, enum-added, enum-removed, enum-value, typedef-added,
typedef-removed, typedef-changed, macro-added, macro-removed, macro-value.
Records (structs and unions: one tag namespace in C) are named by their tag,
fields as TAG.FIELD (TAG.MEMBER.FIELD inside nested records). Macros are those
named NVIDIA_P2P_*; function-like ones are compared by their presence and
parameters only.
"""

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile

CLANG = os.environ.get("NVABI_CLANG", "clang-19")
MACRO_PREFIX = "NVIDIA_P2P_"
DEFAULT_TOLERATED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tolerated.txt")

SHIM_TYPES = """\
/* nvabi's stand-in for the kernel's <linux/types.h> (x86_64). */
#ifndef _NVABI_LINUX_TYPES_H
#define _NVABI_LINUX_TYPES_H
typedef signed char s8;
typedef unsigned char u8;
typedef short s16;
typedef unsigned short u16;
typedef int s32;
typedef unsigned int u32;
typedef long long s64;
typedef unsigned long long u64;
typedef u8 __u8;
typedef u16 __u16;
typedef u32 __u32;
typedef u64 __u64;
typedef s8 __s8;
typedef s16 __s16;
typedef s32 __s32;
typedef s64 __s64;
typedef s8 int8_t;
typedef u8 uint8_t;
typedef s16 int16_t;
typedef u16 uint16_t;
typedef s32 int32_t;
typedef u32 uint32_t;
typedef s64 int64_t;
typedef u64 uint64_t;
typedef unsigned long size_t;
typedef long ssize_t;
typedef unsigned long uintptr_t;
typedef u64 dma_addr_t;
typedef u64 phys_addr_t;
typedef _Bool bool;
#endif
"""


class ToolError(Exception):
    """A header could not be read or compiled, or a file is malformed."""


def find_header(path):
    """The nv-p2p.h a command-line argument names (a file or a driver tree)."""
    if os.path.isfile(path):
        return path
    for rel in ("kernel-open/nvidia/nv-p2p.h", "nvidia/nv-p2p.h", "nv-p2p.h"):
        cand = os.path.join(path, rel)
        if os.path.isfile(cand):
            return cand
    raise ToolError(f"{path}: no nv-p2p.h (looked for kernel-open/nvidia/, nvidia/)")


def _clang(args, shim):
    cmd = [CLANG, "-x", "c", "-std=gnu11", "--target=x86_64-linux-gnu", "-nostdinc",
           "-I", shim, "-include", "linux/types.h", "-w"] + args
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise ToolError(f"{CLANG} not found (set NVABI_CLANG)") from e
    if res.returncode != 0:
        raise ToolError(f"{' '.join(cmd)} failed:\n{res.stderr.strip()}")
    return res.stdout


_ANON = re.compile(r"\((?:unnamed|anonymous)(?: (?:struct|union|enum))? at [^)]*\)")
_TAGGED = r"(?<!struct )(?<!union )(?<!enum )"


class Canon:
    """Canonical spelling of types: typedefs resolved, anonymous names unified."""

    def __init__(self, typedefs):
        self.typedefs = typedefs
        self._re = None
        if typedefs:
            names = "|".join(sorted((re.escape(n) for n in typedefs), key=len, reverse=True))
            self._re = re.compile(_TAGGED + r"\b(" + names + r")\b")

    def __call__(self, t):
        t = _ANON.sub("(anonymous)", t)
        for _ in range(16):
            if self._re is None:
                break
            new = self._re.sub(lambda m: self.typedefs[m.group(1)], t)
            if new == t:
                break
            t = new
        t = re.sub(r"\s+", " ", t).strip()
        t = re.sub(r"\s*\*", " *", t).replace("* *", "**").replace("* *", "**")
        t = re.sub(r"\(\s+", "(", t)
        t = re.sub(r"\s+\)", ")", t)
        return t


def _enum_values(decl):
    out = {}
    nxt = 0
    for c in decl.get("inner", []):
        if c.get("kind") != "EnumConstantDecl":
            continue
        val = None
        for e in c.get("inner", []):
            if "value" in e:
                val = int(e["value"])
        if val is None:
            val = nxt
        out[c["name"]] = val
        nxt = val + 1
    return out


_LAYOUT_LINE = re.compile(r"^\s*(\d+)(?::(\d+)-(\d+))? \| (\s*)(.*\S)\s*$")
_LAYOUT_SIZE = re.compile(r"\[sizeof=(\d+),.*?align=(\d+)")


def _parse_layouts(text, canon):
    """Records from -fdump-record-layouts-complete: size, align, flattened fields."""
    records = {}
    for block in text.split("*** Dumping AST Record Layout")[1:]:
        lines = [l for l in block.splitlines() if l.strip()]
        m = _LAYOUT_LINE.match(lines[0])
        if not m:
            continue
        tag, _, name = canon(m.group(5)).partition(" ")
        if name.startswith("__") or "(anonymous)" in name:
            continue
        rec = {"tag": tag, "size": None, "align": None, "fields": {}}
        stack = []  # (indent, member name or None), the path to a field
        for line in lines[1:]:
            sm = _LAYOUT_SIZE.search(line)
            if sm:
                rec["size"], rec["align"] = int(sm.group(1)), int(sm.group(2))
                break
            lm = _LAYOUT_LINE.match(line)
            if not lm:
                continue
            off, bit_lo, bit_hi, indent, decl = lm.groups()
            depth = len(indent)
            while stack and stack[-1][0] >= depth:
                stack.pop()
            dm = re.match(r"^(.*?)\s*(\w+)$", decl)
            if not dm:
                # An anonymous struct or union member: its fields are named
                # as if they were the parent's.
                stack.append((depth, None))
                continue
            ftype, fname = canon(dm.group(1)), dm.group(2)
            stack.append((depth, fname))
            full = ".".join(p for _, p in stack if p is not None)
            offset = int(off) if bit_lo is None else f"{off}:{bit_lo}-{bit_hi}"
            rec["fields"][full] = {"offset": offset, "type": ftype, "order": len(rec["fields"])}
        records[name] = rec
    return records


def _parse_macros(text, baseline):
    out = {}
    for line in text.splitlines():
        m = re.match(r"#define (\w+)(\([^)]*\))?(?: (.*))?$", line)
        if not m or not m.group(1).startswith(MACRO_PREFIX) or line in baseline:
            continue
        name, params, body = m.group(1), m.group(2), (m.group(3) or "").strip()
        if params is not None:
            out[name] = "function-like" + re.sub(r"\s+", "", params)
            continue
        out[name] = _macro_value(body)
    return out


def _macro_value(body):
    if body == "":
        return "(defined, empty)"
    s = body
    while s.startswith("(") and s.endswith(")"):
        s = s[1:-1].strip()
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", s)
    if m:
        v = int(m.group(1), 0)
        return f"{v:#010x}" if m.group(1).lower().startswith("0x") or v > 0xffff else str(v)
    return re.sub(r"\s+", " ", body)


def extract(path):
    """The ABI facts of one nv-p2p.h, as plain data (see --json)."""
    header = os.path.abspath(find_header(path))
    with tempfile.TemporaryDirectory(prefix="nvabi.") as tmp:
        shim = os.path.join(tmp, "shim")
        os.makedirs(os.path.join(shim, "linux"))
        with open(os.path.join(shim, "linux", "types.h"), "w") as f:
            f.write(SHIM_TYPES)
        tu = os.path.join(tmp, "tu.c")
        with open(tu, "w") as f:
            f.write(f'#include "{header}"\n')
        empty = os.path.join(tmp, "empty.c")
        with open(empty, "w") as f:
            f.write("\n")
        ast = json.loads(_clang(["-fsyntax-only", "-Xclang", "-ast-dump=json", tu], shim))
        layouts = _clang(["-fsyntax-only", "-Xclang", "-fdump-record-layouts-complete", tu], shim)
        macros = _clang(["-E", "-dM", tu], shim)
        baseline = set(_clang(["-E", "-dM", empty], shim).splitlines())

    decls = [d for d in ast.get("inner", []) if not d.get("isImplicit")]
    raw_typedefs = {}
    for d in decls:
        if d.get("kind") == "TypedefDecl":
            t = d["type"]
            raw_typedefs[d["name"]] = t.get("desugaredQualType", t["qualType"])
    canon = Canon(raw_typedefs)
    own = set(raw_typedefs) - set(re.findall(r"^typedef .* (\w+);$", SHIM_TYPES, re.M))

    facts = {"header": header, "functions": {}, "records": {}, "enums": {},
             "typedefs": {}, "macros": {}}
    for d in decls:
        kind = d.get("kind")
        if kind == "FunctionDecl":
            params = [canon(p["type"].get("qualType"))
                      for p in d.get("inner", []) if p.get("kind") == "ParmVarDecl"]
            ftype = d["type"]["qualType"]
            ret = canon(ftype[:ftype.index("(")]) if "(" in ftype else canon(ftype)
            facts["functions"][d["name"]] = {
                "return": ret, "params": params, "variadic": bool(d.get("variadic"))}
        elif kind == "EnumDecl":
            facts["enums"].update(_enum_values(d))
    for name in sorted(own):
        facts["typedefs"][name] = canon(name)
    facts["records"] = _parse_layouts(layouts, canon)
    facts["macros"] = _parse_macros(macros, baseline)
    return facts


def _proto(f):
    params = list(f["params"]) + (["..."] if f["variadic"] else [])
    return f"{f['return']} ({', '.join(params)})"


def compare(a, b):
    """Every difference between the facts of two headers, as dicts."""
    diffs = []

    def add(kind, name, av=None, bv=None, detail=""):
        diffs.append({"kind": kind, "name": name, "a": av, "b": bv, "detail": detail})

    fa, fb = a["functions"], b["functions"]
    for n in sorted(set(fa) | set(fb)):
        if n not in fb:
            add("function-removed", n, _proto(fa[n]))
        elif n not in fa:
            add("function-added", n, None, _proto(fb[n]))
        elif fa[n] != fb[n]:
            what = []
            if fa[n]["return"] != fb[n]["return"]:
                what.append(f"returns {fa[n]['return']} -> {fb[n]['return']}")
            pa, pb = fa[n]["params"], fb[n]["params"]
            if len(pa) != len(pb):
                what.append(f"{len(pa)} -> {len(pb)} parameters")
            for i, (x, y) in enumerate(zip(pa, pb)):
                if x != y:
                    what.append(f"parameter {i + 1}: {x} -> {y}")
            if fa[n]["variadic"] != fb[n]["variadic"]:
                what.append("variadic changed")
            add("function-changed", n, _proto(fa[n]), _proto(fb[n]), "; ".join(what))

    ra, rb = a["records"], b["records"]
    for n in sorted(set(ra) | set(rb)):
        if n not in rb:
            add("record-removed", n, f"{ra[n]['tag']} of size {ra[n]['size']}")
            continue
        if n not in ra:
            add("record-added", n, None, f"{rb[n]['tag']} of size {rb[n]['size']}")
            continue
        x, y = ra[n], rb[n]
        if x["tag"] != y["tag"]:
            add("record-tag", n, x["tag"], y["tag"])
        if x["size"] != y["size"]:
            add("record-size", n, x["size"], y["size"])
        if x["align"] != y["align"]:
            add("record-align", n, x["align"], y["align"])
        for f in sorted(set(x["fields"]) | set(y["fields"]),
                        key=lambda k: (x["fields"].get(k) or y["fields"][k])["order"]):
            full = f"{n}.{f}"
            xf, yf = x["fields"].get(f), y["fields"].get(f)
            if yf is None:
                add("field-removed", full, f"{xf['type']} at {xf['offset']}")
            elif xf is None:
                add("field-added", full, None, f"{yf['type']} at {yf['offset']}")
            else:
                if xf["offset"] != yf["offset"]:
                    add("field-offset", full, xf["offset"], yf["offset"])
                if xf["type"] != yf["type"]:
                    add("field-type", full, xf["type"], yf["type"])

    for key, kind in (("enums", "enum"), ("typedefs", "typedef"), ("macros", "macro")):
        xa, xb = a[key], b[key]
        changed = "value" if kind != "typedef" else "changed"
        for n in sorted(set(xa) | set(xb)):
            if n not in xb:
                add(f"{kind}-removed", n, xa[n])
            elif n not in xa:
                add(f"{kind}-added", n, None, xb[n])
            elif xa[n] != xb[n]:
                add(f"{kind}-{changed}", n, xa[n], xb[n])
    return diffs


def load_tolerated(path):
    """Rules from the allowlist: KIND NAME-GLOB [a~RE] [b~RE] REASON..."""
    rules = []
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise ToolError(f"{path}: {e.strerror}") from e
    for no, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if len(words) < 3:
            raise ToolError(f"{path}:{no}: want KIND NAME [a~RE] [b~RE] REASON")
        rule = {"kind": words[0], "name": words[1], "a": None, "b": None, "line": no}
        rest = words[2:]
        while rest and rest[0][:2] in ("a~", "b~"):
            try:
                rule[rest[0][0]] = re.compile(rest[0][2:])
            except re.error as e:
                raise ToolError(f"{path}:{no}: bad regex {rest[0]!r}: {e}") from e
            rest = rest[1:]
        if not rest:
            raise ToolError(f"{path}:{no}: a rule needs a reason")
        rule["reason"] = " ".join(rest)
        rules.append(rule)
    return rules


def tolerated_by(diff, rules):
    """The first rule that tolerates a difference, or None."""
    for r in rules:
        if r["kind"] != diff["kind"] or not fnmatch.fnmatchcase(diff["name"], r["name"]):
            continue
        if r["a"] is not None and not r["a"].fullmatch(str(diff["a"])):
            continue
        if r["b"] is not None and not r["b"].fullmatch(str(diff["b"])):
            continue
        return r
    return None


def _render(d):
    a, b = d["a"], d["b"]
    if a is not None and b is not None:
        text = f"{a} -> {b}"
    else:
        text = str(a if a is not None else b)
    if d["detail"]:
        text = d["detail"] if d["kind"] == "function-changed" else f"{text} ({d['detail']})"
    return f"{d['kind']:<17} {d['name']}: {text}"


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="nvabi.py", description="Compare the nv-p2p ABI of nv-p2p.h headers.")
    ap.add_argument("--check", action="store_true",
                    help="compare the first header with each other one, allowing tolerated differences")
    ap.add_argument("--tolerated", default=DEFAULT_TOLERATED, metavar="FILE",
                    help="the allowlist for --check (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a report")
    ap.add_argument("--facts", action="store_true", help="print the facts of each header (JSON)")
    ap.add_argument("headers", nargs="+", metavar="HEADER")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        facts = [extract(h) for h in args.headers]
        if args.facts:
            json.dump(facts, sys.stdout, indent=2)
            print()
            return 0
        if len(args.headers) < 2:
            raise ToolError("need at least two headers to compare")
        rules = load_tolerated(args.tolerated) if args.check else []
    except ToolError as e:
        print(f"nvabi: error: {e}", file=sys.stderr)
        return 2

    if args.check:
        pairs = [(0, i) for i in range(1, len(facts))]
    else:
        pairs = [(i - 1, i) for i in range(1, len(facts))]
    results = []
    status = 0
    for i, j in pairs:
        diffs = compare(facts[i], facts[j])
        for d in diffs:
            r = tolerated_by(d, rules) if args.check else None
            d["tolerated"] = r is not None
            d["why"] = r["reason"] if r else None
            d["rule"] = f"{os.path.basename(args.tolerated)}:{r['line']}" if r else None
        bad = [d for d in diffs if not d["tolerated"]]
        if bad:
            status = 1
        results.append({"a": args.headers[i], "b": args.headers[j],
                        "differences": diffs, "not_tolerated": len(bad)})

    if args.json:
        json.dump({"mode": "check" if args.check else "diff", "status": status,
                   "comparisons": results}, sys.stdout, indent=2)
        print()
        return status
    for res in results:
        diffs = res["differences"]
        print(f"== {res['a']}")
        print(f"   vs {res['b']}")
        rules_used = {}
        for d in diffs:
            if not args.check:
                print(f"   {_render(d)}")
            elif d["tolerated"]:
                rules_used[d["rule"]] = d["why"]
                print(f"   ok  {_render(d)}  [{d['rule']}]")
            else:
                print(f"   BAD {_render(d)}  [not tolerated]")
        if args.check:
            n = len(diffs)
            print(f"   {n} difference{'s' * (n != 1)}, {res['not_tolerated']} not tolerated")
            for rule, why in sorted(rules_used.items(), key=lambda kv: int(kv[0].split(":")[1])):
                print(f"   [{rule}] {why}")
        else:
            print(f"   {len(diffs)} difference{'s' * (len(diffs) != 1)}")
    if args.check:
        print("ABI check: " + ("ok, every difference is tolerated" if status == 0
                               else "FAILED, differences gdrpeer does not tolerate"))
    return status


if __name__ == "__main__":
    sys.exit(main())
