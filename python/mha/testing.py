"""mha.testing: assertions for test suites (pytest shows their message as it is)."""
import os
from typing import Any, Mapping, Union

from . import _run
from .__init__ import _compare_argv, _in_process_compare


def assert_attention_close(steps: Union[str, "os.PathLike[str]", Mapping[str, Any]], **options: Any) -> None:
    """Pass silently when every step in steps (a dict of arrays or torch
    tensors under mha's keys or the usual names: q, scores, attn_weights,
    output, dX, ...) agrees with mha's run of the same options (x=,
    weights=, heads=, causal=, rtol=, atol=, ...); else raise
    AssertionError whose message is 'mha compare's report: each step, the
    first that differs and where, and the mistake that explains it."""
    __tracebackhide__ = True  # pytest: the report, not this frame
    done = _in_process_compare(steps, dict(options))
    if done is not None:
        data, text = done
        if not data["agree"]:
            raise AssertionError(text)
        return
    r = _run.in_work([steps, *options.values()],
                     lambda work: _run.run(_compare_argv(steps, options, work), work, ok=(0, 1)))
    if r.returncode == 1:
        raise AssertionError(r.stdout.rstrip("\n"))
