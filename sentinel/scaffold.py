"""Files `sentinel new` writes into a user's repository (`sentinel init ci`'s workflow: workflow.py).

Each template is complete and commented, so the written file teaches what to change.
`write` never overwrites a file unless asked (`--force`).
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError
from .report import write_atomic

ADAPTER = '''\
"""RL-Sentinel adapter for {name}: how sentinel calls {name}'s loss-path code.

Written by `sentinel new adapter {name}`. An adapter translates canonical inputs (`[B, T]`
padded tensors with a `loss_mask`; see `sentinel list boundaries`) into your trainer's
conventions, calls the trainer's REAL function, and translates the outputs back. It never
decides a verdict: the scenarios' invariants do.

Try it (from this folder, or with this folder on PYTHONPATH):

    sentinel run {catalog}/kl --target {module}:{cls}
    sentinel list boundaries --target {module}:{cls}
    python -m pytest test_{module}.py
"""

from __future__ import annotations

from typing import Any

import torch

from sentinel import Adapter, BoundaryResult, FunctionRef, TargetLoadError, Unsupported, implements


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """A stand-in for your trainer's KL function (k1 = log pi - log pi_ref), so that this file
    runs as written. Replace it: import the real one in `load` and call it in `b_kl`. In fp32 at
    least: bf16 log-probs subtracted in bf16 lose log r's accuracy (kl-k1-bf16-log-probs)."""
    return log_probs.float() - ref_log_probs.float()


class {cls}(Adapter):
    name = "{name}"
    description = "{name} (adapter written from the `sentinel new adapter` template)"
    # Boundaries {name} does not have, with the reason reports show (sentinel list boundaries).
    declines = {{"opsm_mask": "{name} has no off-policy sequence masking"}}
    # Where {name} departs from the reference math on purpose, with why and where it says so:
    # `sentinel hunt --target ... --against reference` then reports it as a deviation, not a bug.
    #   deviations = {{"kl-clamped": deviation("kl", observables=("kl",), reason="clamps the log-ratio to +-20",
    #                                         link="https://github.com/you/{name}/blob/main/losses.py#L40")}}
    # Inputs {name}'s data path never produces (`from sentinel import Precondition`), see the README.

    def load(self) -> dict[str, Any]:
        """Import the trainer here: `self.root` is the checkout given with --repo (put it first on
        sys.path), None for the installed package. Raise TargetLoadError naming the pip command
        when an import fails. Return facts for the report (version, ...)."""
        self.kl_fn = kl_penalty  # e.g. `from mytrainer.losses import kl_penalty`
        return {{"version": "template"}}

    @implements("kl", calls=(kl_penalty,))
    def b_kl(self, inputs: dict[str, torch.Tensor], config: dict[str, Any]) -> BoundaryResult:
        """Inputs: log_probs, ref_log_probs, loss_mask (each token [B, T]); config: kl_type
        (defaults and derived values already filled in). Output: kl, token [B, T] float."""
        if config["kl_type"] != "k1":
            raise Unsupported(f"this adapter maps only kl_type k1, not {{config['kl_type']!r}}")
        # Return what the trainer returned. Never multiply an output by the mask (or zero it, or
        # trim a row): the invariants read each output only where its contract makes it valid, and
        # a mask applied here would hide what the trainer itself does at masked positions.
        kl = self.kl_fn(inputs["log_probs"], inputs["ref_log_probs"])
        return BoundaryResult({{"kl": kl}}, function=FunctionRef.of(self.kl_fn))
'''

ADAPTER_TEST = '''\
"""The {name} adapter through RL-Sentinel's real worker: the k1 KL scenario holds, the others
are reported unsupported (the template maps k1 only). Written by `sentinel new adapter`."""

from pathlib import Path

from sentinel import TargetSpec, load_scenarios, run
from sentinel.catalog import catalog_path


def test_kl_scenarios(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))  # the worker imports the adapter
    report = run(load_scenarios([catalog_path() / "kl" / "kl-estimators.yaml"]), [TargetSpec("{module}:{cls}")])
    verdicts = {{r.id: r.verdict for r in report.results}}
    assert verdicts["kl-k1"] == "holds", report.results[0].reason
    assert set(verdicts.values()) <= {{"holds", "unsupported"}}
'''


def adapter_files(name: str) -> dict[str, str]:
    """{file name: text} of a new adapter for trainer `name` and its test."""
    module = f"{name.replace('-', '_')}_adapter"
    if not module.isidentifier():
        raise UsageError(f"{name!r} does not make a Python module name (letters, digits, _ and -)")
    cls = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) + "Adapter"
    facts = dict(name=name, module=module, cls=cls, catalog="$(python -c 'import sentinel.catalog as c; print(c.catalog_path())')")
    return {f"{module}.py": ADAPTER.format(**facts), f"test_{module}.py": ADAPTER_TEST.format(**facts)}


def write(path: Path, text: str, force: bool = False) -> Path:
    """Write `text` to `path` (atomically), refusing to overwrite an existing file unless `force`."""
    if path.exists() and not force:
        raise UsageError(f"{path} exists (use --force to overwrite it)")
    write_atomic(path, text)
    return path
