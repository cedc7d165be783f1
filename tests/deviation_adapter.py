"""A toy target for tests/test_deviation_source.py: the package `devtoy` (its `kl.py`) in a
git repository the test builds. Its k1 KL is 1.5 * (log_probs - ref_log_probs) and its
token-mean half the mean (`devtoy/agg.py`), conventions the adapter declares as deviations from
the reference, tied to the bodies of `devtoy.kl:k1` and `devtoy.agg:token_mean` it was read at
(the test's V1 and AGG)."""

from __future__ import annotations

import torch

from sentinel.adapters.contract import BoundaryResult, deviation, implements
from sentinel.adapters.trainer import TrainerAdapter
from sentinel.errors import Unsupported

V1_HASH = "52cb5448c724"  # excuses.body_hash of V1's k1 (the test checks it)
AGG_HASH = "7d60c7bf60ef"  # and of AGG's token_mean


class DeviationToy(TrainerAdapter):
    name = "deviation-toy"
    package, marker = "devtoy", "devtoy.kl"
    modules = lookup_modules = ("devtoy.kl", "devtoy.agg")
    loss_path_files = ("devtoy/kl.py", "devtoy/agg.py")
    deviations = {"scaled-k1": deviation(
        "kl", observables=("kl", "grad:kl/log_probs", "grad:kl/ref_log_probs"), reason="the toy's k1 is scaled by 1.5 on purpose", link="devtoy/kl.py",
        source="devtoy.kl:k1", body=V1_HASH),
        "half-token-mean": deviation(
            "loss_agg", observables=("loss",), when={"mode": ["token-mean"]}, reason="the toy halves its token mean",
            link="devtoy/agg.py", source="devtoy.agg:token_mean", body=AGG_HASH)}

    @implements("kl", calls=("devtoy.kl:k1",))
    def b_kl(self, inputs, config):
        if config.get("kl_type", "k1") != "k1":
            raise Unsupported(f"no {config['kl_type']} here")
        fn = self._fn("k1", boundary="kl")
        m = inputs["loss_mask"].bool()
        d = fn(inputs["log_probs"], inputs["ref_log_probs"])
        return BoundaryResult({"kl": torch.where(m, d, torch.zeros_like(d))}, function=self._ref(fn))

    @implements("loss_agg", calls=("devtoy.agg:token_mean",))
    def b_loss_agg(self, inputs, config):
        if config.get("mode", "token-mean") != "token-mean":
            raise Unsupported(f"no {config['mode']} here")
        fn = self._fn("token_mean", boundary="loss_agg")
        return BoundaryResult({"loss": fn(inputs["values"], inputs["loss_mask"])}, function=self._ref(fn))
