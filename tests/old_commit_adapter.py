"""A toy target for tests/test_old_commits.py: the package `oldtrainer` (its `losses.py`) in a
git repository the test builds, loaded the way real trainers are (`TrainerAdapter`, its heavy
dependency `heavylib` stubbable)."""

from __future__ import annotations

from sentinel.adapters.contract import BoundaryResult, implements
from sentinel.adapters.trainer import TrainerAdapter


class OldCommitAdapter(TrainerAdapter):
    name = "old-commit"
    package, marker = "oldtrainer", "oldtrainer.losses"
    heavy = frozenset({"heavylib"})
    modules = lookup_modules = ("oldtrainer.losses",)
    loss_path_files = ("oldtrainer/losses.py",)

    @implements("loss_agg", calls=("oldtrainer.losses:token_mean",))
    def b_loss_agg(self, inputs, config):
        fn = self._fn("token_mean", boundary="loss_agg")
        # by keyword, as the newest version names them: an older `token_mean(values, m)` is a
        # TypeError raised right here, in the adapter's own frame
        loss = fn(values=inputs["values"], mask=inputs["loss_mask"])
        return BoundaryResult({"loss": loss}, function=self._ref(fn))
