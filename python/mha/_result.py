"""_result.py: what the package's functions return: a run's steps (Result,
Head), a comparison's report (Report) and a checkpoint's layer (Layer)."""
import json
from collections.abc import Mapping

import numpy as np


def _attribute(table, name, missing):
    """table[name] as an attribute; AttributeError(missing % name) when it is not there"""
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return table[name]
    except KeyError:
        raise AttributeError(missing % name) from None


class _Items(Mapping):
    """a read-only mapping over the dict self._items"""

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)


class Head:
    """One head's steps: head.softmax, head.scores, ... (its plane of each stacked "heads.*" step)."""

    def __init__(self, index, arrays):
        self.index = index
        self._arrays = arrays

    def __getattr__(self, name):
        return _attribute(self._arrays, name, "head %d has no step %%r (it has %s)"
                          % (self.index + 1, ", ".join(sorted(self._arrays))))

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._arrays))

    def __repr__(self):
        return "<mha head %d: %s>" % (self.index + 1, ", ".join(self._arrays))


class Result(_Items):
    """A run's steps as NumPy arrays under the JSON schema's keys.

    r.output, r.X, r.Q, r.mask, r.concat, r.dX, ...: a whole-model step;
    r["heads.softmax"]: a per-head step stacked by head (heads x n_q x n_kv;
    a batch's: batch x heads x ...); r.heads[h].softmax: head h's (from 0,
    as in the JSON output's "heads" array); r.meta: the run's settings, as
    the JSON output's "meta".  Only the steps asked for (steps=) are there.
    """

    def __init__(self, arrays, meta):
        self._items = arrays
        self._meta = meta  # or a callable that reads it, the first time it is asked for

    @property
    def meta(self):
        """the run's settings, as the JSON output's "meta\""""
        if callable(self._meta):
            self._meta = self._meta()
        return self._meta

    def __getattr__(self, name):
        return _attribute(self._items, name, "no step %%r in this run (it has %s; steps= asks for others)"
                          % ", ".join(self._items))

    def __dir__(self):
        return sorted(set(super().__dir__()) | {k for k in self._items if "." not in k})

    @property
    def heads(self):
        """each head's steps, from 0: r.heads[1].softmax is head 2's"""
        per = {k[len("heads."):]: v for k, v in self._items.items() if k.startswith("heads.")}
        if not per:
            return []
        axis = 1 if self.meta.get("batch") else 0
        n = next(iter(per.values())).shape[axis]
        return [Head(h, {k: np.take(v, h, axis=axis) for k, v in per.items()}) for h in range(n)]

    def __repr__(self):
        return "<mha result: %s>" % ", ".join("%s %s" % (k, "x".join(map(str, v.shape)))
                                             for k, v in self._items.items())


def read_npz(path):
    """an .npz the command wrote: its arrays and its meta"""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "meta"}
        meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
    return Result(arrays, meta)


class Report:
    """mha compare's report.

    agree: every step given agrees; first_difference: the first step that
    does not (None); diagnosis: the mistake that explains it (a dict as the
    JSON report gives it, or None); steps: each step's line, as dicts;
    data: the whole JSON report.  str(report) is the report as
    'mha compare' prints it.
    """

    def __init__(self, data, text):
        self.data = data
        self._text = text

    agree = property(lambda self: self.data["agree"])
    first_difference = property(lambda self: self.data["first_difference"])
    diagnosis = property(lambda self: self.data["diagnosis"])
    steps = property(lambda self: self.data["steps"])

    def __str__(self):
        return self._text()

    def __repr__(self):
        return "<mha compare: %s>" % ("agree" if self.agree else "%s differs" % self.first_difference)


class Layer(_Items):
    """A checkpoint's attention layer as mha reads it (what 'mha model' shows).

    As a mapping it holds forward's keywords that name it (weights, layer,
    prefix, config, layout): mha.forward(x, **layer) runs that layer, the
    command reading its tensors and config.json as it always does.
    layer.settings is 'mha model -f json's entry for it (heads, kv_heads,
    d_k, scale, causal, rope, window, softcap, norm, sinks, biases, the
    config keys used); layer.heads and the like read it.  layer.arrays
    holds its tensors as a run computes with them, as NumPy arrays: W_Q,
    W_K, W_V, W_O and the biases as -w takes them (d_in x d_out), q_norm,
    k_norm, sinks and latent attention's under their options' names.
    """

    def __init__(self, keywords, settings, arrays):
        self._items = keywords
        self.settings = settings
        self.arrays = arrays

    def __getattr__(self, name):
        return _attribute(self.settings, name, "no setting %%r (there are %s)" % ", ".join(self.settings))

    def __repr__(self):
        return "<mha layer %s of %s: %s heads, %s key/value heads>" % (
            self.settings.get("layer"), self._items.get("weights"), self.settings.get("heads"),
            self.settings.get("kv_heads"))
