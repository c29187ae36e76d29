"""tools/ncu_loops.py on a made-up ncu source page: loops found by their backward branches, named by what
they issue, their samples summed; the exact pass's hottest instructions listed by default (no GPU)."""

import csv

from tools import ncu_loops as tool

HEADER = ["Address", "Source", tool.SAMPLES, "stall_long_sb", "stall_barrier", "stall_Not Issued x", "Instructions Executed"]
# (address, source, samples, long scoreboard, barrier): an fp16 scan loop at 0x100-0x130, an exact pass
# at 0x200-0x230, a loop without products at 0x300-0x310 (left out), straight code between.
LINES = [
    (0x000, "MOV R1, c[0x0][0x28]", 1, 0, 0),
    (0x100, "QGMMA.64x128x32.F16.E4M3.E4M3 R24, gdesc[UR4], RZ", 10, 0, 10),
    (0x110, "HMNMX2 R2, R24, RZ, !PT", 6, 0, 0),
    (0x120, "@P0 BAR.SYNC 0x1", 15, 0, 15),
    (0x130, "@P1 BRA 0x100", 0, 0, 0),
    (0x200, "LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64]", 20, 20, 0),
    (0x210, "QGMMA.64x64x32.F32.E4M3.E4M3 R40, gdesc[UR8], RZ", 8, 0, 0),
    (0x220, "FFMA R5, R40, R6, R5", 2, 0, 0),
    (0x230, "BRA 0x200", 0, 0, 0),
    (0x300, "IADD3 R7, R7, 0x1, RZ", 30, 0, 0),
    (0x310, "BRA 0x300", 0, 0, 0),
]


def source_page(tmp_path):
    path = tmp_path / "src.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "fused_mqa_topk_gate_kernel"])
        w.writerow(HEADER)
        for address, source, samples, long_sb, barrier in LINES:
            w.writerow([f"{address:#x}", source, f"{samples:,}", long_sb, barrier, 99, 1])
        w.writerow(["", "", "", "", "", "", ""])  # (blank rows are skipped)
    return path


def test_product_loops_are_found_named_and_summed(tmp_path):
    instructions = tool.read_source_page(source_page(tmp_path))
    assert len(instructions) == len(LINES) and instructions[3].opcode == "BAR.SYNC"
    loops = {x.kind: x for x in tool.product_loops(instructions)}
    assert set(loops) == {"fp16 scan", "exact pass"}  # (the loop issuing no products is not one)
    scan, exact = loops["fp16 scan"], loops["exact pass"]
    assert (scan.lo, scan.hi, scan.instructions, scan.samples) == (0x100, 0x130, 4, 31)
    assert (exact.lo, exact.hi, exact.instructions, exact.samples) == (0x200, 0x230, 4, 30)
    assert scan.stalls["stall_barrier"] == 25 and exact.stalls["stall_long_sb"] == 20
    assert all("stall_Not Issued x" not in x.stalls for x in (scan, exact))


def test_the_report_lists_the_loops_then_the_exact_pass_by_default_or_a_range(tmp_path):
    instructions = tool.read_source_page(source_page(tmp_path))
    text = tool.report(instructions, top=2).splitlines()
    assert text[0] == "instructions 11 samples 92.0"  # (the loops by samples, most first)
    assert text[1].startswith("fp16 scan          0x100-0x130 4 instr, 33.7% of samples; barrier 81%")
    assert text[2].startswith("exact pass         0x200-0x230 4 instr, 32.6% of samples; long_sb 67%")
    assert text[3] == "region samples 30.0 32.6%" and "LDGSTS" in text[4] and "QGMMA" in text[5] and len(text) == 6
    ranged = tool.report(instructions, 0x300, 0x310, top=1).splitlines()
    assert ranged[3] == "region samples 30.0 32.6%" and "IADD3" in ranged[4]
    assert tool.report(instructions[:5]).endswith("no exact-pass loop: give --range LO HI")
