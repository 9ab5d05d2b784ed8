#!/usr/bin/env python3
"""scripts/gpu-check-times.py: gpu-check's table of expected seconds (bench/gpu-check-times.txt).

  gpu-check-times.py plan TABLE BUDGET ITEM...     the plan gpu-check prints first
  gpu-check-times.py update TABLE RESULTS.jsonl    measured seconds into the table

The table has a line per item: its name (CHECK.PART, or the check's name alone), its expected
seconds, its time limit in seconds, and where the figure comes from ("measured DATE GPU: ..." or
"estimate: ..."); '#' starts a comment.

plan prints, for each item in the order given, its expected seconds and limit, the time by which
it ends when every item before it takes its expected seconds, and where the figure comes from;
then whether every item fits the budget, naming those that do not. Exit status: 0, or 2 when an
item has no line in the table (add one: the budget cannot be planned without it).

update replaces the expected seconds of every item that ran to an end in RESULTS.jsonl (passed or
failed, not timed out, not skipped, not a dry run) with its measured seconds, rounded up, and its
source with "measured DATE GPU"; the comments and the other lines stay as they are.
"""
import json
import math
import re
import sys
from datetime import datetime, timezone

ROW = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+(.*)$")


def read(path):
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            m = ROW.match(text)
            if not m:
                sys.exit(f"gpu-check-times: {path}:{n}: not 'item seconds limit source': {text}")
            rows[m[1]] = (int(m[2]), int(m[3]), m[4])
    return rows


def plan(path, budget, items):
    rows = read(path)
    missing = [i for i in items if i not in rows]
    if missing:
        print(f"gpu-check: no expected seconds for {', '.join(missing)} in {path}: add a line "
              "(item seconds limit source) for each", file=sys.stderr)
        return 2
    total = sum(rows[i][0] for i in items)
    checks = list(dict.fromkeys(i.split(".")[0] for i in items))
    print(f"## plan: {len(items)} items in {len(checks)} checks, {total} s expected of the "
          f"{budget} s budget (expected seconds from {path})")
    print(f"{'item':<31} {'expected':>8} {'limit':>6} {'ends by':>8}  source")
    end, over = 0, []
    for i in items:
        seconds, limit, source = rows[i]
        end += seconds
        if end > budget:
            over.append(i)
        basis = source.split(":")[0]
        mark = "  <- beyond the budget" if end > budget else ""
        print(f"{i:<31} {seconds:>6} s {limit:>4} s {end:>6} s  {basis}{mark}")
    if over:
        print(f"beyond the {budget} s budget at these figures, skipped unless earlier items end "
              f"sooner: {' '.join(over)}")
    else:
        print(f"every item fits the {budget} s budget at these figures, {budget - total} s to spare")
    return 0


def update(path, results):
    measured, gpu, dry = {}, None, False
    with open(results) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "run":
                gpu, dry = r.get("gpu"), bool(r.get("dry_run"))
            if "item" in r and r.get("outcome") in ("passed", "failed") and \
                    r.get("exit") not in (124, 137):
                measured[r["item"]] = r["seconds"]
    if dry:
        print(f"gpu-check-times: {results} is a dry run's: its seconds are the table's own",
              file=sys.stderr)
        return 1
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    out, changed = [], []
    with open(path) as f:
        for line in f:
            m = ROW.match(line.strip())
            if m and not line.startswith("#") and m[1] in measured:
                item, limit = m[1], m[3]
                seconds = max(1, math.ceil(measured[item]))
                source = f"measured {day} {gpu or 'GPU'}: {measured[item]:.1f} s"
                changed.append(f"{item}: {m[2]} -> {seconds} s")
                line = f"{item:<31}{seconds:>6} {int(limit):>5}  {source}\n"
            out.append(line)
    with open(path, "w") as f:
        f.writelines(out)
    print(f"gpu-check-times: {len(changed)} rows of {path} from {results}")
    for c in changed:
        print(f"  {c}")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "plan":
        return plan(argv[1], int(argv[2]), argv[3:])
    if len(argv) == 3 and argv[0] == "update":
        return update(argv[1], argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
