"""tilesafe's benchmark suite: ``python -m benchmarks all --out benchmarks/results/<gpu>-<date>``.

Each benchmark measures tilesafe and its references in the same process and writes CSV rows
``benchmark, dtype, size, variant, value, unit, reference, reference_value, ratio`` (ratio: ours
over the same-run reference, higher is better) plus PNG plots. Benchmarks are not tests: the
correctness checks they run before timing only guard the numbers.
"""
