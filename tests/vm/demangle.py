#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Shortens the Rust v0 symbols (_R...) of a profile to their paths.

Reads text on stdin and writes it with each mangled symbol replaced by the
identifiers it names, joined with '::' (generic arguments flattened into the
path): good enough to read a profile, not a full demangler.
"""
import re
import sys

# Crate hashes, disambiguators and back-references carry no identifier.
NOISE = re.compile(r'Cs[0-9A-Za-z]+_|(?<=[MXY])s[0-9A-Za-z]*_|B[0-9A-Za-z]{0,3}_')


def idents(sym):
    s = NOISE.sub('', sym[2:])
    out, i = [], 0
    while i < len(s):
        m = re.match(r'(\d+)', s[i:])
        if not m:
            i += 1
            continue
        n, start = int(m.group(1)), i + len(m.group(1))
        if start < len(s) and s[start] == '_':
            start += 1
        ident = s[start:start + n]
        if n and re.fullmatch(r'[A-Za-z_][A-Za-z0-9_]*', ident):
            out.append(ident)
            i = start + n
        else:
            i = start
    return '::'.join(out) or sym


for line in sys.stdin:
    sys.stdout.write(re.sub(r'\b_R[0-9A-Za-z_]+', lambda m: idents(m.group(0)), line))
