"""Kernel tier: SGLang's Triton MLA attention on DeepSeek-V3 shapes, checked, timed, and written as calibration.

Modules: ``cases`` (what is launched, its bytes and FLOPs), ``inputs`` (random tensors in
SGLang's KV-pool layout), ``reference`` (float32/float64 PyTorch attention), ``verify``
(correct before timed), ``timing`` (the one do_bench-style timing function), ``ceilings``
(copy bandwidth and matmul rate measured in the same run), ``run`` (a sweep),
``calibration`` (the file the twin reads), ``bench`` (what the asv benchmarks measure once per
environment), ``cli`` (`dpbench kernels …`).
"""
