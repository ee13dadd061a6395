#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Host tests of tests/abi/nvabi.py, on small synthetic headers and on
include/nv-p2p.h with the real allowlist (tests/abi/tolerated.txt).

  python3 tests/abi/test_nvabi.py [-v]
"""

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import nvabi  # noqa: E402

OURS = os.path.join(HERE, "..", "..", "include", "nv-p2p.h")

# A small header in our style (kernel types).
BASE = """\
#include <linux/types.h>
struct pci_dev;
enum kind { KIND_A = 0, KIND_B, KIND_C = 7 };
#define NVIDIA_P2P_THING_VERSION 0x00020000
#define NVIDIA_P2P_CAP_THING
struct thing_page { u64 addr; u32 regs[6]; };
typedef struct thing_table {
	u32 version;
	u32 page_size;
	struct thing_page **pages;
	u32 entries;
	u8 *uuid;
	u32 flags;
} thing_table_t;
int thing_get(u64 va, u64 len, struct thing_table **table, void (*cb)(void *), void *data);
int thing_put(struct thing_table *table);
"""


def run(*argv):
    """nvabi.main(argv): (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = nvabi.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


class Base(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="test_nvabi.")
        self.tmp = self._tmp.name
        self.n = 0

    def tearDown(self):
        self._tmp.cleanup()

    def header(self, text):
        self.n += 1
        path = os.path.join(self.tmp, f"h{self.n}.h")
        with open(path, "w") as f:
            f.write(text)
        return path

    def diffs(self, a, b):
        rc, out, err = run("--json", a, b)
        self.assertIn(rc, (0, 1), err)
        return rc, json.loads(out)["comparisons"][0]["differences"]

    def kinds(self, a, b):
        return {(d["kind"], d["name"]) for d in self.diffs(a, b)[1]}


class Facts(Base):
    def test_identical_headers_differ_in_nothing(self):
        a, b = self.header(BASE), self.header(BASE)
        self.assertEqual(run(a, b)[0], 0)
        self.assertEqual(run("--check", "--tolerated", os.devnull, a, b)[0], 0)

    def test_kernel_and_stdint_spellings_are_the_same_type(self):
        stdint = BASE.replace("u64", "uint64_t").replace("u32", "uint32_t").replace("u8 ", "uint8_t ")
        stdint = stdint.replace("struct thing_table **table", "thing_table_t **table")
        self.assertNotEqual(stdint, BASE)
        self.assertEqual(self.kinds(self.header(BASE), self.header(stdint)), set())

    def test_layout_facts(self):
        facts = nvabi.extract(self.header(BASE))
        table = facts["records"]["thing_table"]
        self.assertEqual((table["tag"], table["size"], table["align"]), ("struct", 40, 8))
        self.assertEqual(table["fields"]["entries"]["offset"], 16)
        self.assertEqual(table["fields"]["pages"]["type"], "struct thing_page **")
        self.assertEqual(facts["enums"], {"KIND_A": 0, "KIND_B": 1, "KIND_C": 7})
        self.assertEqual(facts["macros"]["NVIDIA_P2P_THING_VERSION"], "0x00020000")
        self.assertEqual(facts["macros"]["NVIDIA_P2P_CAP_THING"], "(defined, empty)")
        self.assertEqual(facts["functions"]["thing_get"]["params"],
                         ["unsigned long long", "unsigned long long", "struct thing_table **",
                          "void (*)(void *)", "void *"])

    def test_every_kind_of_difference_is_reported(self):
        changed = (BASE.replace("\tu32 entries;", "\tu64 pad;\n\tu32 entries;")
                   .replace("u8 *uuid", "u16 *uuid")
                   .replace("KIND_C = 7", "KIND_C = 8")
                   .replace("0x00020000", "0x00010002")
                   .replace("#define NVIDIA_P2P_CAP_THING\n", "#define NVIDIA_P2P_CAP_OTHER\n")
                   .replace("int thing_get(u64 va, u64 len", "int thing_get(u64 va, u32 len")
                   .replace("int thing_put(struct thing_table *table);\n",
                            "int thing_new(void);\nunion u { u32 a; u64 b; };\n"))
        got = self.kinds(self.header(BASE), self.header(changed))
        want = {
            ("field-added", "thing_table.pad"),
            ("field-offset", "thing_table.entries"),
            ("field-offset", "thing_table.uuid"),
            ("field-offset", "thing_table.flags"),
            ("field-type", "thing_table.uuid"),
            ("record-size", "thing_table"),
            ("record-added", "u"),
            ("enum-value", "KIND_C"),
            ("macro-value", "NVIDIA_P2P_THING_VERSION"),
            ("macro-added", "NVIDIA_P2P_CAP_OTHER"),
            ("macro-removed", "NVIDIA_P2P_CAP_THING"),
            ("function-changed", "thing_get"),
            ("function-added", "thing_new"),
            ("function-removed", "thing_put"),
        }
        self.assertEqual(got, want)

    def test_function_change_names_the_parameter(self):
        changed = BASE.replace("void *data);", "const void *data);")
        rc, diffs = self.diffs(self.header(BASE), self.header(changed))
        self.assertEqual(rc, 1)
        self.assertEqual(len(diffs), 1)
        self.assertEqual(diffs[0]["detail"], "parameter 5: void * -> const void *")

    def test_struct_becoming_a_union_is_reported(self):
        changed = BASE.replace("struct thing_page { u64", "union thing_page { u64")
        changed = changed.replace("struct thing_page **", "union thing_page **")
        got = self.kinds(self.header(BASE), self.header(changed))
        self.assertIn(("record-tag", "thing_page"), got)
        self.assertIn(("field-type", "thing_table.pages"), got)


    def test_anonymous_members_and_bit_fields(self):
        text = "struct s { u32 a; union { u32 b; u64 c; }; struct { u16 d:4, e:12; } f; };\n"
        fields = nvabi.extract(self.header(text))["records"]["s"]["fields"]
        self.assertEqual(fields["c"]["offset"], 8)
        self.assertEqual(fields["f.e"]["offset"], "16:4-15")
        wider = text.replace("d:4, e:12", "d:5, e:11")
        got = self.kinds(self.header(text), self.header(wider))
        self.assertEqual(got, {("field-offset", "s.f.d"), ("field-offset", "s.f.e")})


class Allowlist(Base):
    def rules(self, text):
        path = os.path.join(self.tmp, "tolerated.txt")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_tolerated_difference_passes_and_others_fail(self):
        rules = self.rules("# comment\n"
                           "macro-value NVIDIA_P2P_THING_VERSION b~0x0001.... 1.x is read too\n"
                           "field-removed thing_table.flags only 2.x has it\n"
                           "record-size thing_table a~40 b~32 the driver allocates it\n")
        v1 = BASE.replace("0x00020000", "0x00010002").replace("\tu32 flags;\n", "")
        a, b = self.header(BASE), self.header(v1)
        rc, out, _ = run("--check", "--tolerated", rules, a, b)
        self.assertEqual(rc, 0, out)
        self.assertIn("3 differences, 0 not tolerated", out)
        # Without the allowlist the same differences matter.
        self.assertEqual(run(a, b)[0], 1)
        # A value constraint that does not hold: a 3.x version is not tolerated.
        v3 = v1.replace("0x00010002", "0x00030000")
        rc, out, _ = run("--check", "--tolerated", rules, a, self.header(v3))
        self.assertEqual(rc, 1)
        self.assertRegex(out, r"BAD macro-value +NVIDIA_P2P_THING_VERSION")
        # A field that moved is not tolerated, even with the rest allowed.
        moved = v1.replace("\tu32 entries;", "\tu32 pad;\n\tu32 entries;")
        rc, out, _ = run("--check", "--tolerated", rules, a, self.header(moved))
        self.assertEqual(rc, 1)
        self.assertRegex(out, r"BAD field-offset +thing_table.entries: 16 -> 20")

    def test_malformed_allowlist_is_a_tool_error(self):
        a = self.header(BASE)
        self.assertEqual(run("--check", "--tolerated", self.rules("macro-value X\n"), a, a)[0], 2)
        self.assertEqual(run("--check", "--tolerated", self.rules("macro-value X b~( why\n"), a, a)[0], 2)
        self.assertEqual(run("--check", "--tolerated", self.rules("macro-value X a~1\n"), a, a)[0], 2)
        self.assertEqual(run("--check", "--tolerated", os.path.join(self.tmp, "none"), a, a)[0], 2)


class Usage(Base):
    def test_usage_and_tool_errors_exit_2(self):
        a = self.header(BASE)
        self.assertEqual(run(a)[0], 2)
        self.assertEqual(run()[0], 2)
        self.assertEqual(run("--bogus", a, a)[0], 2)
        self.assertEqual(run(a, os.path.join(self.tmp, "missing.h"))[0], 2)
        rc, _, err = run(a, self.header("struct { broken"))
        self.assertEqual(rc, 2)
        self.assertIn("failed", err)

    def test_driver_trees_in_both_layouts(self):
        for rel in ("kernel-open/nvidia", "nvidia"):
            root = os.path.join(self.tmp, rel.replace("/", "_"))
            os.makedirs(os.path.join(root, rel))
            with open(os.path.join(root, rel, "nv-p2p.h"), "w") as f:
                f.write(BASE)
            self.assertEqual(run(self.header(BASE), root)[0], 0)


# A driver header as NVIDIA's 1.x releases (535 to 570) write it, derived from
# ours: stdint types, page table 1.2 without flags, extra entry points.
def driver_1x(ours):
    text = re.sub(r"\bu(8|32|64)\b", r"uint\1_t", ours)
    text = text.replace("#include <linux/types.h>\n", "")
    text = text.replace("#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00020000",
                        "#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002")
    text = re.sub(r"\n#define NVIDIA_P2P_PAGE_TABLE_FLAGS_CPU_CACHEABLE 0x1\n", "\n", text)
    text = re.sub(r"\tuint32_t flags;[^\n]*\n", "", text)
    text = text.replace("#endif /* _GDRPEER_NV_P2P_H_ */",
                        "int nvidia_p2p_init_mapping(uint64_t p2p_token, void *params,\n"
                        "\tvoid (*destroy_callback)(void *data), void *data);\n"
                        "int nvidia_p2p_destroy_mapping(uint64_t p2p_token);\n"
                        "#define NVIDIA_P2P_RSYNC_DRIVER_VERSION 0x00010001\n"
                        "#endif\n")
    return text


class OurHeader(Base):
    """`nvabi.py --check include/nv-p2p.h DRIVER` with tests/abi/tolerated.txt."""

    def setUp(self):
        super().setUp()
        with open(OURS) as f:
            self.ours_text = f.read()
        self.v1 = driver_1x(self.ours_text)
        self.assertNotIn("flags;", self.v1)
        self.assertIn("0x00010002", self.v1)

    def check(self, text):
        return run("--check", OURS, self.header(text))

    def test_ours_against_itself(self):
        self.assertEqual(run("--check", OURS, OURS)[0], 0)

    def test_a_1x_driver_is_tolerated(self):
        rc, out, _ = self.check(self.v1)
        self.assertEqual(rc, 0, out)
        for line in ("ok  record-size       nvidia_p2p_page_table: 40 -> 32",
                     "ok  field-removed     nvidia_p2p_page_table.flags: unsigned int at 32",
                     "ok  macro-value       NVIDIA_P2P_PAGE_TABLE_VERSION: 0x00020000 -> 0x00010002",
                     "ok  function-added    nvidia_p2p_init_mapping"):
            self.assertIn(line, out)

    def test_a_2x_driver_with_a_later_dma_minor_is_tolerated(self):
        later = self.ours_text.replace("NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003",
                                       "NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020010")
        self.assertEqual(self.check(later)[0], 0)

    def test_a_driver_without_persistent_pins_is_tolerated(self):
        text = re.sub(r"#define NVIDIA_P2P_CAP_GET_PAGES_PERSISTENT_API\n", "", self.v1)
        text = re.sub(r"int nvidia_p2p_(get|put)_pages_persistent\([^;]*;\n", "", text)
        self.assertNotIn("persistent(", text)
        self.assertEqual(self.check(text)[0], 0)

    def assert_not_tolerated(self, text, kind, name):
        rc, out, _ = self.check(text)
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, rf"BAD {re.escape(kind)} +{re.escape(name)}:")
        self.assertIn("ABI check: FAILED", out)

    def test_a_moved_field_is_not_tolerated(self):
        moved = self.v1.replace("\tuint32_t entries;", "\tuint32_t pad;\n\tuint32_t entries;")
        self.assert_not_tolerated(moved, "field-offset", "nvidia_p2p_page_table.entries")

    def test_a_changed_parameter_type_is_not_tolerated(self):
        changed = self.v1.replace("uint64_t length, struct nvidia_p2p_page_table **page_table,\n"
                                  "\t\t\t void (*free_callback)",
                                  "uint32_t length, struct nvidia_p2p_page_table **page_table,\n"
                                  "\t\t\t void (*free_callback)")
        self.assertNotEqual(changed, self.v1)
        self.assert_not_tolerated(changed, "function-changed", "nvidia_p2p_get_pages")

    def test_a_changed_field_type_is_not_tolerated(self):
        changed = self.v1.replace("\tuint64_t *dma_addresses;", "\tuint32_t *dma_addresses;")
        self.assertNotEqual(changed, self.v1)
        self.assert_not_tolerated(changed, "field-type", "nvidia_p2p_dma_mapping.dma_addresses")

    def test_a_3x_page_table_is_not_tolerated(self):
        v3 = self.v1.replace("0x00010002", "0x00030000")
        self.assert_not_tolerated(v3, "macro-value", "NVIDIA_P2P_PAGE_TABLE_VERSION")

    def test_an_older_dma_mapping_minor_is_not_tolerated(self):
        older = self.v1.replace("NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020003",
                                "NVIDIA_P2P_DMA_MAPPING_VERSION 0x00020002")
        self.assert_not_tolerated(older, "macro-value", "NVIDIA_P2P_DMA_MAPPING_VERSION")

    def test_a_changed_enum_value_is_not_tolerated(self):
        changed = self.v1.replace("NVIDIA_P2P_PAGE_SIZE_64KB = 1", "NVIDIA_P2P_PAGE_SIZE_64KB = 3")
        self.assertNotEqual(changed, self.v1)
        self.assert_not_tolerated(changed, "enum-value", "NVIDIA_P2P_PAGE_SIZE_64KB")

    def test_a_removed_function_gdrpeer_calls_is_not_tolerated(self):
        gone = re.sub(r"int nvidia_p2p_dma_unmap_pages\([^;]*;\n", "", self.v1)
        self.assertNotEqual(gone, self.v1)
        self.assert_not_tolerated(gone, "function-removed", "nvidia_p2p_dma_unmap_pages")

    def test_a_grown_page_table_is_not_tolerated(self):
        grown = self.ours_text.replace("\tu32 flags;", "\tu32 flags;\n\tu32 more;")
        self.assertNotEqual(grown, self.ours_text)
        self.assert_not_tolerated(grown, "field-added", "nvidia_p2p_page_table.more")


if __name__ == "__main__":
    unittest.main()
