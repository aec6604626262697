"""``python -m dpbench.envs.zygote BASE OWNER_PID``: a zygote (started by the caller's side)."""

import sys
from pathlib import Path

from dpbench.envs.zygote.serve import serve

serve(Path(sys.argv[1]), int(sys.argv[2]))
