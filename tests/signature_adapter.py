"""Reference targets with a planted bug on `policy_loss`, for the stable-signature tests
(tests/test_signature_stable.py; imported by the worker as `signature_adapter:<Class>`, the
tests put this folder on PYTHONPATH).

- DualClipIgnored: the dual clip (eps_clip_c) is never applied.
"""

from __future__ import annotations

from sentinel_adapters.reference.adapter import ReferenceAdapter


class DualClipIgnored(ReferenceAdapter):
    name = "sig-dual-clip-ignored"

    def b_policy_loss(self, inputs, config):
        return super().b_policy_loss(inputs, {**config, "eps_clip_c": None})
