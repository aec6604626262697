"""Bracket the decode failures at batch 256: is it the pool's size (int32 element offsets)?

A [slots, 1, 576] bf16 pool; slot s starts at element s*576. int32 holds up to 2**31-1,
so offsets overflow from slot 3,728,271. Page size 64 puts B*16384 tokens in B*256 pages
plus page 0: B=227 ends at slot 3,719,231 (below), B=228 at 3,735,615 (above).

Run on a GPU machine after the kernel check's set-up (docs/kernels.md), writing
$OUT/overflow.json.
"""

import json
import os

from dpbench.kernels.cases import Case
from dpbench.kernels.run import run_cases
from dpbench.sglang_compat.kernels import load_attention_kernels

k = load_attention_kernels("auto")
cases = [
    Case(kind="decode", heads=128, page_size=page, batch=b, context=16384)
    for page in (64, 1)
    for b in (227, 228)
]
out = run_cases(cases, kernels=k, device="cuda", warmup_ms=5, rep_ms=20)
rep = {
    "limit_slot": (2**31 - 1) // 576,
    "points": [(p["case"], p["rel_error"], p["median_s"]) for p in out.points],
    "failures": out.failures,
    "skipped": out.skipped,
}
print(json.dumps(rep, indent=1, default=str))
with open(os.path.join(os.environ["OUT"], "overflow.json"), "w") as fh:
    json.dump(rep, fh, indent=1, default=str)
