"""`import deepspeed` as zero, for a DeepSpeed script run by `zero-run --as-deepspeed`, which
puts this folder first on the job's PYTHONPATH, for that job only. This is not DeepSpeed and
is never installed: zero's own package does the mapping (zero/_as_deepspeed.py), and says
which DeepSpeed, if one is installed, it leaves unused. docs/from-deepspeed.md.
"""

try:
    import zero._as_deepspeed
except ImportError as error:
    raise ImportError(f"`import deepspeed` is zero's here (zero-run --as-deepspeed), and zero "
                      f"does not import ({error}): install it (pip install ./python) or put "
                      "its folder on PYTHONPATH (PYTHONPATH=python)") from error

zero._as_deepspeed.take_over(__name__)
