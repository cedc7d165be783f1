"""AReaL adapter: calls AReaL's own PPO loss-path code at the canonical boundaries.

Target: https://github.com/areal-project/AReaL (``areal`` on PyPI), either the installed
package (``root=None``) or a checkout (``root`` = the folder holding ``areal/``).

What each boundary reaches (nothing here re-implements AReaL's math):

=================  ==========================================================================
advantages         ``PPOActor.compute_advantages`` (public; it wraps ``_compute_advantages``),
                   on a ``PPOActor`` built from AReaL's ``PPOActorConfig`` / ``NormConfig``
gae                ``areal.trainer.ppo.gae._compute_token_level_gae`` (absent before #1600)
reward_norm        ``areal.utils.data.Normalization`` built from ``NormConfig``
policy_loss        ``areal.utils.functional.ppo_actor_loss_fn`` (token or sequence level IS,
                   optional decoupled loss with rejection sampling)
cispo_loss         ``areal.utils.functional.cispo_loss_fn`` (absent before #1412: unsupported)
is_correction      ``ppo_actor_loss_fn`` with a ``RejectionSamplingConfig`` (vanilla_tis =
                   token clamp, icepop = token mask)
kl                 ``areal.utils.data.KLEstimator``
=================  ==========================================================================

Token alignment (the one convention that needs translating)
-----------------------------------------------------------
Canonical token tensors are aligned to the token they describe: ``x[b, t]`` is about token
``t`` (``log_probs[b, t] = log pi(token t | tokens < t)``). AReaL's training tensors are
aligned to the position that *predicts* a token: index ``p`` describes token ``p + 1``.
Rollout tensors (``loss_mask``, inference ``logprobs``) arrive token-aligned and
``_compute_advantages`` rolls them left by one itself
(``loss_mask = torch.roll(loss_mask, shifts=-1)``); tensors produced by AReaL's engines
(``ref_logp``, critic ``values``) are already predict-aligned. So the canonical
``loss_mask`` is exactly AReaL's before-roll mask, and for ``advantages`` the adapter
hands AReaL a batch one column wider, with one prompt token in front:

* token-aligned inputs (``attention_mask``, ``loss_mask``, ``log_probs`` as ``logprobs``)
  get a leading column (attention 1, loss 0, log-prob 0);
* predict-aligned inputs (``ref_log_probs`` as ``ref_logp``, ``values``) are placed as
  they are (AReaL column ``p`` predicts canonical token ``p``) with a trailing 0 column:
  the slot past the last token, which AReaL reads as the bootstrap value of a row that
  ran out of length (no canonical input holds it, so it is 0);
* every token output (``advantages``, ``returns``, ``tot_rewards``, ``kl_rewards``) is
  AReaL's columns ``0 .. T-1``: predicting position ``p`` is canonical token ``p``.
  Untrained positions hold whatever AReaL leaves there (its GAE carries the first
  trained token's advantage back over the prompt); only ``loss_mask`` positions mean
  anything.

Every canonical token, the first included, then has a predicting position, and AReaL's
own roll wraps only the prompt column. Row lengths grow by one for every row alike, so the
no-EOS test (``attention_mask.sum(-1) == width``) is unchanged.

The loss functions (``ppo_actor_loss_fn``, ``cispo_loss_fn``, ``KLEstimator``) are
element-wise or per-row over tensors that share one alignment, so canonical tensors are
passed as they are.

Rows and groups
---------------
AReaL's public ``compute_advantages`` takes a list of trajectory dicts, one per prompt
group (``[group_size, T]`` each). The adapter builds that list from the canonical
``group`` ids (rows of a group laid out contiguously, in order of first appearance, and
put back in canonical order afterwards), else from ``config.group_size`` (consecutive
chunks), else one dict per row. Versions with variable-size group support (#1454) read the
group sizes from that list; older ones slice by ``NormConfig.group_size``.

Import shims
------------
``import areal`` pulls in its whole runtime (ray, transformers, tracking clients, async
HTTP, ...). The boundary code needs none of it: `conventions.STUBS` are replaced by permissive stubs
(``sentinel/adapters/shims.py``) when not installed; the ``areal`` extra (``pip install 'rl-sentinel[areal]'``,
pyproject.toml) lists the light packages
that are imported for real. Two more side effects of the import are contained:
AReaL reconfigures process-wide logging (``areal.utils.logging.getLogger`` replaces
``Logger.root`` / ``Logger.manager``), which the adapter restores afterwards (and quiets
AReaL's INFO lines); and AReaL calls ``torch.compile`` at import time on helpers that no
boundary uses, which loads dynamo and inductor, so during the import ``torch.compile`` on a
plain function is deferred to that function's first call (`_deferred_torch_compile`).

Modules: ``adapter`` (`ArealAdapter`: loading and the boundaries, each marked with the AReaL
functions it calls), ``conventions`` (AReaL's module names, the heavy modules stubbed, KL and
normalisation names), ``surfaces`` (log-probs, metrics and masked normalisation), ``legacy``
(the 2025 config booleans and the logits-taking loss entry, for old commits), ``options`` (the
options the hunt draws beyond the boundaries' own, AReaL's ``trainer:`` options among them, and
the options AReaL reads that stay at one value, with why). The configs handed to AReaL
(``PPOActorConfig``, ``NormConfig``, ``RejectionSamplingConfig``) are recorded while a call is
observed (``sentinel.adapters.options``): the hunt reports what AReaL read and what it varied.
"""

from .adapter import ArealAdapter

__all__ = ["ArealAdapter"]
