"""HTA's TraceAnalysis with its defaults on a trace folder, in a process of its own, as a user
runs it: `python tests/hta_child.py TRACE_DIR OUT.json` writes the breakdowns the reader tests
compare as JSON records.

HTA parses several ranks in a fork()ed multiprocessing pool; forked from the test process,
whose other threads (servers and pipe readers of other tests) may hold a lock at that moment,
a worker could wait on it for ever and the suite hang."""
from __future__ import annotations

import json
import sys


def main(trace_dir: str, out: str) -> int:
    from hta.trace_analysis import TraceAnalysis
    analysis = TraceAnalysis(trace_dir=trace_dir)
    ranks = sorted(int(r) for r in analysis.t.traces)
    by_type, top = analysis.get_gpu_kernel_breakdown(visualize=False)
    result = {
        "ranks": ranks,
        "temporal": analysis.get_temporal_breakdown(visualize=False).to_dict("records"),
        "kernel_by_type": by_type.to_dict("records"),
        "kernel_top": top.to_dict("records"),
        "overlap": analysis.get_comm_comp_overlap(visualize=False).to_dict("records"),
        "idle": {str(rank): analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)[0]
                 .to_dict("records") for rank in ranks},
    }
    with open(out, "w") as fh:
        json.dump(result, fh, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
