"""A tiny target for compare/bisect tests: `tinytrainer.py` at the root of a git repository
that the test builds commit by commit (buggy, unrelated, broken import, fixed, ...)."""

from __future__ import annotations

import importlib
import sys

from sentinel.adapters.contract import Adapter, BoundaryResult, FunctionRef
from sentinel.errors import TargetLoadError


class TinyAdapter(Adapter):
    name = "tiny"

    def load(self):
        if self.root is None or not (self.root / "tinytrainer.py").exists():
            raise TargetLoadError(f"tiny: no tinytrainer.py in {self.root}")
        sys.path.insert(0, str(self.root))
        self.mod = importlib.import_module("tinytrainer")
        return {"version": getattr(self.mod, "VERSION", None)}

    def b_opsm_mask(self, inputs, config):
        fn = self.mod.opsm_mask
        mask = fn(inputs["log_probs"], inputs["old_log_probs"], inputs["advantages"], inputs["loss_mask"],
                  config["opsm_delta"])
        return BoundaryResult({"opsm_mask": mask}, function=FunctionRef.of(fn, self.root))
