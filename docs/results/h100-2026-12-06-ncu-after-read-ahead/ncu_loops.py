"""Warp-state samples of the _g16 kernel by inner loop (ncu --page source --csv --print-source sass), then the
hottest instructions of one address range: python3 ncu_loops.py src.csv LO HI [N]."""
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]; data = rows[2:]
ia, isrc, iall = hdr.index("Address"), hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)")
stall_cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
iexec = hdr.index("Instructions Executed")
ins = []
for r in data:
    if len(r) <= iall or not r[ia].strip(): continue
    try: addr = int(r[ia], 16)
    except ValueError: continue
    def num(x):
        try: return float(x.replace(",", ""))
        except: return 0.0
    ins.append((addr, r[isrc], num(r[iall]), {hdr[i]: num(r[i]) for i in stall_cols}, num(r[iexec])))
total = sum(x[2] for x in ins)
print("instructions", len(ins), "samples", total)
loops = []
for addr, src, *_ in ins:
    m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|)?\s*(0x[0-9a-f]+)", src)
    if "BRA" in src:
        t = re.findall(r"0x([0-9a-f]+)", src)
        if t:
            tgt = int(t[-1], 16)
            if tgt < addr: loops.append((tgt, addr))
res = []
for lo, hi in loops:
    body = [x for x in ins if lo <= x[0] <= hi]
    ops = collections.Counter(x[1].split()[0] if not x[1].startswith("@") else x[1].split()[1] for x in body)
    if not any(o.startswith("QGMMA") or o.startswith("HGMMA") for o in ops): continue
    s = sum(x[2] for x in body)
    st = collections.Counter()
    for x in body: st.update(x[3])
    kind = "exact pass" if any(o.startswith("LDGSTS") for o in ops) else ("fp16 scan" if any("HMNMX2" in o for o in ops) else "fp32 scan/sample")
    res.append((s, lo, hi, len(body), kind, st))
for s, lo, hi, n, kind, st in sorted([r for r in res if r[3] < 1200 and r[0] > 0], reverse=True)[:8]:
    print(f"{kind:18s} {lo:#x}-{hi:#x} {n} instr, {s/total*100:.1f}% of samples; " + ", ".join(f"{k[6:]} {v/s*100:.0f}%" for k, v in st.most_common(7)))

exact = [r for r in res if r[4] == "exact pass"]
lo, hi = (int(sys.argv[2], 16), int(sys.argv[3], 16)) if len(sys.argv) > 3 else (max(exact)[1], max(exact)[2])
body = [x for x in ins if lo <= x[0] <= hi]
s = sum(x[2] for x in body)
print("region samples", s, f"{s/total*100:.1f}%")
for x in sorted(body, key=lambda x: -x[2])[:int(sys.argv[4]) if len(sys.argv) > 4 else 25]:
    top = ", ".join(f"{k[6:]} {v:.0f}" for k, v in collections.Counter(x[3]).most_common(3))
    print(f"{x[0]-lo:#6x} {x[2]/s*100:5.1f}%  {x[1][:70]:70s} {top}")
