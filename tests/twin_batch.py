"""Several twin jobs in one process of a release environment, each run as
``python -m dpbench.twin.run JOB -o OUT --events`` runs it (its ``main``), one after another.

SGLang is then imported once for all of them, as the twin's sweeps and capacity searches
import it once for many runs; a run that left state behind for the next would show up as
moved numbers. Started by :func:`identity.run_twins` with ``tests/`` on ``PYTHONPATH``:

    python -m twin_batch OUT_DIR JOB [JOB ...]

Job ``i`` writes its run result to ``OUT_DIR/i.json``, its stdout (the progress events) to
``OUT_DIR/i.events`` and its exit status to ``OUT_DIR/i.status``; its stderr is this
process's.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from dpbench.twin.run import main as run_one

    out_dir, jobs = Path(argv[0]), argv[1:]
    failed = 0
    for i, job in enumerate(jobs):
        with open(out_dir / f"{i}.events", "w") as events, contextlib.redirect_stdout(events):
            status = run_one([job, "-o", str(out_dir / f"{i}.json"), "--events"])
        (out_dir / f"{i}.status").write_text(f"{status}\n")
        failed += status != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
