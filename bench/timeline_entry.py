"""Per-block view of one kernel against the kernel before it, from an
in-graph timeline (a -DINGOT_TIMELINE=ON build run with
INGOT_TIMELINE_OUT=FILE; see bench/timeline.py for the records).

For every launch of kernel AFTER that follows a launch of kernel BEFORE
(launches of a kernel are its records grouped where entries are more than
10 µs apart), it measures, relative to the end of BEFORE (its last block's
exit): the share of AFTER's blocks that entered before that end, their
entry times, a mark of theirs (--mark, default 2) for the blocks that
entered early and for the others, and AFTER's end. Used to see whether a
PDL dependent's blocks sit beside the kernel before and when their work
arrives (docs/perf-notes.md, twenty-second session).

Usage: python3 bench/timeline_entry.py FILE [--before 2] [--after 1]
       [--skip-grid 264] [--mark 2]
Kernel ids as in timeline.py's NAMES (1 gemvx, 2 attention, 3 moe_block).
"""
import argparse

import numpy as np

from timeline import NAMES, REC


def groups(r, sel):
    x = r[sel]
    if not len(x):
        return []
    t = x["t0"].astype(np.int64)
    cut = np.flatnonzero(np.concatenate([[True], np.diff(t) > 10000]))
    return [x[a:b] for a, b in zip(cut, np.append(cut[1:], len(x)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--before", type=int, default=2)
    ap.add_argument("--after", type=int, default=1)
    ap.add_argument("--skip-grid", type=int, action="append", default=[],
                    help="leave out AFTER launches of this grid (e.g. 264: q|k|v and the head)")
    ap.add_argument("--mark", type=int, default=2)
    a = ap.parse_args()
    r = np.fromfile(a.file, dtype=REC)
    r = r[np.argsort(r["t0"], kind="stable")]
    bef = groups(r, r["kid"] == a.before)
    aft = groups(r, (r["kid"] == a.after) & ~np.isin(r["grid"], a.skip_grid))
    astart = np.array([g["t0"].min() for g in aft], dtype=np.int64)
    share, ent, early, late, ends, grids = [], [], [], [], [], set()
    for b in bef:
        be = int(b["t1"].max())
        j = np.searchsorted(astart, int(b["t0"].min()))
        if j >= len(aft):
            continue
        g = aft[j]
        t0 = g["t0"].astype(np.int64) - be
        if t0.min() > 20000:  # not this launch's dependent
            continue
        grids.add(len(g))
        share.append((t0 < 0).mean())
        ent += list(t0)
        ends.append(int(g["t1"].max()) - be)
        m = g["mark"][:, a.mark].astype(np.int64) - be
        ok = g["nmarks"] > a.mark
        early += list(m[ok & (t0 < 0)])
        late += list(m[ok & (t0 >= 0)])
    if not share:
        print("no %s launch follows a %s launch" % (NAMES.get(a.after), NAMES.get(a.before)))
        return
    us = lambda v: np.asarray(v) / 1e3
    print("%s after %s: %d launches, grids %s" % (NAMES.get(a.after), NAMES.get(a.before),
                                                   len(share), sorted(grids)))
    print("blocks entered before the end: mean %.2f, min %.2f, max %.2f"
          % (np.mean(share), np.min(share), np.max(share)))
    print("entry, us after the end (5/25/50/75/95th pct):",
          np.percentile(us(ent), [5, 25, 50, 75, 95]).round(2))
    for name, v in (("entered early", early), ("entered after", late)):
        if v:
            print("mark %d of blocks %s: median %.2f, p90 %.2f us (%d blocks)"
                  % (a.mark, name, np.median(us(v)), np.percentile(us(v), 90), len(v)))
    print("end, us after the end: median %.2f" % np.median(us(ends)))


if __name__ == "__main__":
    main()
