#!/usr/bin/env python3
"""The text gpu-check keeps of an Nsight Systems capture (its profile check).

    scripts/nsys-summary.py PREFIX

reads the CSV files `nsys stats --format csv --output PREFIX` wrote for the reports
cuda_gpu_kern_sum, cuda_gpu_mem_time_sum and cuda_gpu_trace, and prints:
  - the ten kernels with the most GPU time (share, total, calls, name);
  - the copies by kind (total time, count);
  - from the trace, how much of the copies' time ran while a kernel ran (the union of the copy
    intervals intersected with the union of the kernel intervals), the kernels' busy time and
    the span traced: whether the copies hide behind compute.
Exit status: 0, or 1 when a report is missing.
"""

import csv
import os
import sys


def rows(prefix, report):
    path = f"{prefix}_{report}.csv"
    if not os.path.exists(path):
        sys.exit(f"nsys-summary.py: {path} is missing (nsys stats --report {report})")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def column(row, *names):
    """The first of `names` the report has (nsys renames its columns across versions)."""
    for name in names:
        if name in row and row[name] not in (None, ""):
            return row[name]
    return ""


def union(intervals):
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def overlap(a, b):
    total, j = 0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


def main(prefix):
    print(f"== nsys summary: {os.path.basename(prefix)}")
    kernels = rows(prefix, "cuda_gpu_kern_sum")
    print("top kernels by GPU time:")
    for r in kernels[:10]:
        name = column(r, "Name")
        print(f"  {float(column(r, 'Time (%)', 'Time(%)') or 0):5.1f}% "
              f"{int(float(column(r, 'Total Time (ns)', 'Total Time') or 0)) / 1e6:10.1f} ms "
              f"{column(r, 'Instances', 'Calls'):>7} x  {name[:100]}")
    print("copies:")
    for r in rows(prefix, "cuda_gpu_mem_time_sum"):
        print(f"  {int(float(column(r, 'Total Time (ns)', 'Total Time') or 0)) / 1e6:10.1f} ms "
              f"{column(r, 'Count', 'Operations'):>7} x  {column(r, 'Operation', 'Name')}")
    kernel_spans, copy_spans = [], []
    for r in rows(prefix, "cuda_gpu_trace"):
        start = int(float(column(r, "Start (ns)", "Start") or 0))
        end = start + int(float(column(r, "Duration (ns)", "Duration") or 0))
        name = column(r, "Name")
        (copy_spans if name.startswith("[CUDA mem") else kernel_spans).append((start, end))
    kernels_busy, copies = union(kernel_spans), union(copy_spans)
    busy = sum(e - s for s, e in kernels_busy)
    copy_time = sum(e - s for s, e in copies)
    hidden = overlap(copies, kernels_busy)
    first = min([s for s, _ in kernel_spans + copy_spans], default=0)
    last = max([e for _, e in kernel_spans + copy_spans], default=0)
    print(f"copies {copy_time / 1e6:.1f} ms, of which {hidden / 1e6:.1f} ms "
          f"({100 * hidden / copy_time if copy_time else 0:.0f}%) while a kernel ran; kernels busy "
          f"{busy / 1e6:.1f} ms of the {(last - first) / 1e6:.1f} ms traced "
          f"({100 * busy / (last - first) if last > first else 0:.0f}%)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/nsys-summary.py PREFIX")
    sys.exit(main(sys.argv[1]))
