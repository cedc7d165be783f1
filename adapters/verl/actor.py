"""verl's actor method at the `actor_logprobs` boundary: ``DataParallelPPOActor._forward_micro_batch``
(verl/workers/actor/dp_actor.py) on a bare actor whose ``actor_module`` is the stand-in model
(sentinel/adapters/standin.py), one micro-batch of the whole canonical batch.

verl's layout, translated here (`standin.prompt_response`): ``input_ids`` is the prompts
left-padded then the ``responses`` right-padded, ``position_ids`` verl's own
``compute_position_id_with_mask`` of the attention mask (what its rollout hands the actor). The
method runs the model padded, or with ``use_remove_padding`` unpads the ids with verl's
``unpad_input``, rolls the labels, calls the model on one packed sequence, and pads the results
back with ``pad_input``; it divides the logits by the temperature in place, gathers the log-probs
of the responses and their entropy, and slices the response columns. Nothing of that is done here;
its [B, R] results go back to the canonical positions (`standin.scatter_back`). On CUDA those
helpers are flash_attn's ``bert_padding``; flash_attn builds only with CUDA, so where it is
absent the call uses verl's own pure-torch port of them (``verl.utils.npu_flash_attn_utils``,
what verl runs on NPUs) under that name, for the call only. With the drawn ``use_fused_kernels`` the
model's forward is verl's fused one (its torch backend, installed by verl's own patch), which returns
the log-probs and entropy itself from the hidden states and ``lm_head`` (`_fused_model`). With the drawn
``ulysses_sequence_parallel_size`` 2 the method runs on two sequence-parallel ranks, threads of this
process, each with its slice of the packed sequence (adapters/verl/ulysses.py). With the drawn
``mrope_position_ids`` the model is a Qwen2-VL given a text-only batch: 3-D position ids
(adapters/verl/vlm.py).

micro_batch_size and use_dynamic_bsz are ``compute_log_prob``'s: it splits a real ``DataProto`` (a
TensorDict) into micro-batches (``DataProto.split``) or token-budget batches (``prepare_dynamic_batch``),
calls ``_forward_micro_batch`` on each and restores the batch's order (``restore_dynamic_batch``). A call
that sets either goes through ``compute_log_prob`` with the real tensordict package (the ``verl`` extra);
where tensordict is absent (stubbed) that is an error naming the extra, never ``unsupported``: verl
has the options, this environment cannot build their input.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import sys
import types
from pathlib import Path

import torch

from sentinel.adapters.contract import BoundaryResult, Precondition, implements
from sentinel.adapters.loading import module_exists, source_of
from sentinel.adapters.observables import extras
from sentinel.adapters.options import trainer_options
from sentinel.adapters.ranks import run_ranks
from sentinel.adapters.shims import is_stub, module_exists_anywhere
from sentinel.adapters.standin import LogitsTable, StandInLM, actor_preconditions, prompt_response, scatter_back
from sentinel.errors import MissingDependency, Unsupported

from .ulysses import SP, UlyssesStandIn, collected, sequence_parallel_group
from .vlm import QWEN2_VL, VisionLanguageStandIn, mrope_position_ids, qwen2_vl_output_class, vision_config

ACTOR = "actor_logprobs"
DP_ACTOR = "verl.workers.actor.dp_actor"
FUSED_PATCH = "verl.models.transformers.monkey_patch"
_LINK = "https://github.com/volcengine/verl/blob/main/verl/workers/actor/dp_actor.py"
_BALANCING = "https://github.com/volcengine/verl/blob/main/verl/utils/seqlen_balancing.py"
_ACTOR_CONFIG = "https://github.com/volcengine/verl/blob/main/verl/workers/config/actor.py"
ULYSSES = "verl.utils.ulysses"

# what _forward_micro_batch reads on self, set for one process, no sequence parallelism, no fused
# kernels, no prefix grouper (the drawn options override them per call); param_dtype float32
# (autocast on CPU takes bf16 / fp16 only)
_ACTOR_ATTRIBUTES = {"use_fused_kernels": False, "use_ulysses_sp": False, "ulysses_sequence_parallel_size": 1,
                     "use_prefix_grouper": False, "use_dynamic_bsz": False, "param_dtype": torch.float32}


# what verl's GPUMemoryLogger (on compute_log_prob) asks get_torch_device(), torch.cpu here: before 6a9a1b87
# (2025-07) it asked unconditionally, and torch.cpu has none of these. A memory log, no loss math: CPU memory
# reads 0, as verl's own CPU branch answers since then.
_MEMORY_QUERIES = {"memory_allocated": lambda *a, **k: 0, "memory_reserved": lambda *a, **k: 0,
                   "max_memory_allocated": lambda *a, **k: 0, "max_memory_reserved": lambda *a, **k: 0,
                   "mem_get_info": lambda *a, **k: (0, 0)}


@contextlib.contextmanager
def cpu_memory_queries():
    """torch.cpu answers the memory queries it lacks, for the call only."""
    added = [n for n in _MEMORY_QUERIES if not hasattr(torch.cpu, n)]
    for n in added:
        setattr(torch.cpu, n, _MEMORY_QUERIES[n])
    try:
        yield
    finally:
        for n in added:
            delattr(torch.cpu, n)


_PADDING = ("index_first_axis", "pad_input", "rearrange", "unpad_input")
_CACHED = ("_index_first_axis", "_pad_input", "_rearrange", "_unpad_input")


def _undecorated(fn, name: str):
    """`fn` without its decorators: verl's GPUMemoryLogger wraps compute_log_prob in a closure that
    keeps no ``__wrapped__``, so the report would name the profiler's wrapper."""
    fn = inspect.unwrap(fn) if fn is not None else None
    for cell in getattr(fn, "__closure__", None) or ():
        inner = cell.cell_contents
        if callable(inner) and getattr(inner, "__name__", None) == name:
            return _undecorated(inner, name)
    return fn


def _width(inputs) -> int:
    """The padded sequence length of the batch in verl's layout (`prompt_response`)."""
    return int(prompt_response(inputs["tokens"], inputs["attention_mask"], inputs["loss_mask"])[0].shape[1])


def _sp_size(config) -> int:
    return int(trainer_options(config).get("ulysses_sequence_parallel_size") or 1)


def _budget_fits(inputs, config) -> bool:
    # compute_log_prob scales the budget by the sequence-parallel size (each rank holds its slice)
    return not config.get("use_dynamic_bsz") or config.get("max_token_len") is None or \
        int(config["max_token_len"]) * _sp_size(config) >= _width(inputs)


class _Base(torch.nn.Module):
    """The decoder under an LM head: its hidden states hold the stand-in's logits, v at slot
    ``slots[v]`` (slot 0 stays 0), so only ``lm_head`` (`_FusedStandIn`) maps them back."""

    def __init__(self, lm: StandInLM, slots: torch.Tensor):
        super().__init__()
        self.lm, self.slots = lm, slots

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        from transformers.modeling_outputs import BaseModelOutputWithPast

        logits = self.lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        hidden = logits.new_zeros(*logits.shape[:-1], len(self.slots) + 1).index_copy(-1, self.slots, logits)
        return BaseModelOutputWithPast(last_hidden_state=hidden)


class _FusedStandIn(torch.nn.Module):
    """A causal LM as verl's fused forward reads it: ``model``, ``lm_head.weight``, ``config``. The
    head is [V, V + 1], one 1 a row at the logit's slot (the vocabulary reversed after a zero slot):
    hidden @ W.T gives the drawn logits back exactly, while a transposed use of W fails on its shape
    and a permuted one gives other logits (an identity head would hide both); it takes a gradient,
    as a trained head does, so verl's backward computes the weight's too."""

    def __init__(self, lm: StandInLM, vocab: int, dtype: torch.dtype):
        super().__init__()
        slots = torch.arange(vocab, 0, -1)
        self.model = _Base(lm, slots)
        self.lm_head = torch.nn.Linear(vocab + 1, vocab, bias=False, dtype=dtype)
        with torch.no_grad():
            self.lm_head.weight.zero_()
            self.lm_head.weight[torch.arange(vocab), slots] = 1
        self.config = types.SimpleNamespace(model_type="sentinel_stand_in", output_attentions=False,
                                            output_hidden_states=False)


@contextlib.contextmanager
def _checkpoint_without_reentry(on: bool):
    """verl's checkpointing options call torch.utils.checkpoint.checkpoint with no use_reentrant, and
    torch's default there, the reentrant variant, supports .backward() only: the hunt observes
    gradients with torch.autograd.grad, which raised on every such example. For the call that
    default is the non-reentrant variant (the same values and gradients at verl's call sites,
    whose function takes the logits as its argument); a use_reentrant verl passes is kept.
    What this hides: a bug only the reentrant variant has (a gradient lost through a tensor the
    function captures instead of taking it as an argument, an output detached where no argument
    requires grad, keyword arguments refused), and torch's warning that use_reentrant is unset."""
    if not on:
        yield
        return
    real = torch.utils.checkpoint.checkpoint

    def checkpoint(function, *args, use_reentrant=None, **kw):
        return real(function, *args, use_reentrant=False if use_reentrant is None else use_reentrant, **kw)

    torch.utils.checkpoint.checkpoint = checkpoint
    try:
        yield
    finally:
        torch.utils.checkpoint.checkpoint = real


class _Config(dict):
    """The actor's config as _forward_micro_batch reads it: ``.get`` and attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class ActorSurface:
    """The `actor_logprobs` boundary on verl (mixed into `VerlAdapter`)."""

    preconditions = {**actor_preconditions("verl", _LINK), "verl-token-budget": Precondition(
        _budget_fits, boundaries=(ACTOR,), link=_BALANCING,
        reason="verl's rearrange_micro_batches asserts max_token_len >= the padded sequence length (its trainer "
               "sizes ppo_max_token_len_per_gpu for the longest prompt plus response): a smaller budget never "
               "reaches it"),
        "verl-sequence-parallel-packed": Precondition(
            lambda inputs, config: _sp_size(config) == 1 or bool(config["use_remove_padding"]), boundaries=(ACTOR,),
            link=_ACTOR_CONFIG, reason="verl's actor config refuses Ulysses sequence parallelism without "
                                       "use_remove_padding: a padded batch never reaches the method with it")}

    @implements(ACTOR, calls=(f"{DP_ACTOR}:DataParallelPPOActor._forward_micro_batch",
                              f"{DP_ACTOR}:DataParallelPPOActor.compute_log_prob"))
    def b_actor_logprobs(self, inputs, config):
        if self.root is not None and not module_exists(self.root, DP_ACTOR):  # verl 0.9's wheel ships no workers/actor
            raise Unsupported(f"verl has no {DP_ACTOR.replace('.', '/')}.py at this version")
        try:
            mod = self._import(DP_ACTOR)
        except ModuleNotFoundError as e:  # the module itself absent (an installed verl): not at this version;
            if self.root is None and e.name and DP_ACTOR.startswith(e.name):  # any other failure is an error
                raise Unsupported(f"verl has no {DP_ACTOR} at this version") from None
            raise
        cls = getattr(mod, "DataParallelPPOActor", None)
        fn = getattr(cls, "_forward_micro_batch", None)
        if fn is None:
            raise Unsupported("verl has no DataParallelPPOActor._forward_micro_batch at this version")
        logits, tokens, attn = inputs["logits"], inputs["tokens"], inputs["attention_mask"]
        ids, mask, width, where = prompt_response(tokens, attn, inputs["loss_mask"])
        actor = object.__new__(cls)
        F = self._verl_F()
        drawn = trainer_options(config)  # actor options the method reads (conventions.OPTION_DOMAINS)
        mrope = self._mrope_channels(fn) if drawn.get("mrope_position_ids") else 0
        position_ids = mrope_position_ids(mask, mrope) if mrope else self._position_ids(mask)
        pi_squared, fused = bool(drawn.get("calculate_sum_pi_squared")), bool(drawn.get("use_fused_kernels"))
        if pi_squared and fused:  # DataParallelPPOActor.__init__ asserts it
            raise Unsupported("verl's actor refuses calculate_sum_pi_squared with use_fused_kernels")
        checkpointing = {k: bool(drawn.get(k)) for k in ("entropy_checkpointing", "sum_pi_squared_checkpointing")}
        for k, on in checkpointing.items():
            if on and k not in source_of(fn):
                raise Unsupported(f"{k}: this verl's _forward_micro_batch does not read it")
        sp = _sp_size(config)
        ulysses = self._import(ULYSSES) if sp > 1 and "use_ulysses_sp" in source_of(fn) else None
        if sp > 1 and not hasattr(ulysses, "get_ulysses_sequence_parallel_group"):
            raise Unsupported("ulysses_sequence_parallel_size: this verl's actor has no Ulysses sequence parallelism")
        if sp > 1 and mrope and "is_vlm_model" not in source_of(fn):  # its text path slices 2-D ids only
            raise Unsupported("ulysses_sequence_parallel_size with mrope_position_ids: this verl's actor has no "
                              "Ulysses arm for a vision-language model (is_vlm_model)")
        model = StandInLM(LogitsTable(logits, tokens, attn))
        model = VisionLanguageStandIn(model, mrope) if mrope else model
        model = UlyssesStandIn(model) if sp > 1 else model
        model = self._fused_model(model, vlm=bool(mrope)) if fused else model
        attributes = {**_ACTOR_ATTRIBUTES, "use_fused_kernels": fused, "actor_module": model, "device_name": "cpu",
                      "use_ulysses_sp": sp > 1, "ulysses_sequence_parallel_size": sp,
                      "use_remove_padding": bool(config["use_remove_padding"]),
                      "compute_entropy_from_logits": F.entropy_from_logits,
                      "config": _Config(calculate_sum_pi_squared=pi_squared, entropy_from_logits_with_chunking=False,
                                        **checkpointing)}
        if pi_squared:  # as DataParallelPPOActor.__init__ sets it with use_torch_compile off
            fn_pi = getattr(F, "calculate_sum_pi_squared_from_logits", None)
            if fn_pi is None or "calculate_sum_pi_squared" not in source_of(fn):
                raise Unsupported("calculate_sum_pi_squared: this verl's actor computes no sum of squared "
                                  "probabilities (no calculate_sum_pi_squared_from_logits)")
            attributes["calculate_sum_pi_squared_from_logits"] = fn_pi
        for name, value in attributes.items():
            setattr(actor, name, value)
        entropy = drawn.get("calculate_entropy", True)
        batch = {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids,
                 "responses": ids[:, -width:]}
        batching = config["micro_batch_size"] is not None or bool(config["use_dynamic_bsz"])
        if batching:
            fn = _undecorated(getattr(cls, "compute_log_prob", None), "compute_log_prob")
            if fn is None:
                raise Unsupported("verl has no DataParallelPPOActor.compute_log_prob at this version")

        def call(_rank=None) -> dict:
            if batching:
                return self._compute_log_prob(actor, batch, mask, config, entropy)
            got = actor._forward_micro_batch(batch, temperature=float(config["temperature"]), calculate_entropy=entropy)
            return {"entropys": got[0], "log_probs": got[1]} if isinstance(got, tuple) else got  # tuple before 67a127b4

        with self._padding_helpers(bool(config["use_remove_padding"])), self.cross_entropy_arm(config), \
                _checkpoint_without_reentry(any(checkpointing.values())):
            if sp > 1:  # each rank a thread (adapters/verl/ulysses.py)
                with sequence_parallel_group(ulysses):
                    out = collected(run_ranks(sp, call, groups={SP: [list(range(sp))]}))
            else:
                out = call()
        shape = inputs["loss_mask"].shape
        outputs = {"log_probs": scatter_back(out["log_probs"], where, shape)}
        if out.get("entropys") is not None:
            outputs["entropy"] = scatter_back(out["entropys"], where, shape)
        observed = extras({"sum_pi_squared": scatter_back(out["sum_pi_squared"], where, shape)}) \
            if out.get("sum_pi_squared") is not None else {}
        return BoundaryResult(outputs, function=self._ref(fn), extras=observed)

    def _compute_log_prob(self, actor, batch: dict, mask: torch.Tensor, config, entropy: bool) -> dict:
        """``actor.compute_log_prob`` on a real DataProto of `batch`, the batching options in its
        meta_info as verl's workers put them there; a null token budget is the tightest verl accepts,
        the padded sequence length (`_budget_fits`). Its result as ``_forward_micro_batch``'s:
        {"log_probs", "entropys"}."""
        proto = self._import("verl.protocol").DataProto
        if is_stub(sys.modules.get("tensordict")):  # verl.protocol imported it, or its stub
            raise MissingDependency("micro_batch_size / use_dynamic_bsz: verl batches in compute_log_prob over a "
                                  "DataProto, a TensorDict: the tensordict package is not installed (pip install "
                                  "'rl-sentinel[verl]')")
        n = int(mask.shape[0])
        budget = config["max_token_len"] or int(mask.shape[1])
        data = proto.from_dict(tensors=batch, meta_info={
            "micro_batch_size": int(config["micro_batch_size"] or n), "temperature": float(config["temperature"]),
            "use_dynamic_bsz": bool(config["use_dynamic_bsz"]), "max_token_len": int(budget)})
        with cpu_memory_queries():  # its GPUMemoryLogger
            out = actor.compute_log_prob(data=data, calculate_entropy=entropy)
        if isinstance(out, torch.Tensor):  # older verls: the log-probs alone, or (log_probs, entropys)
            return {"log_probs": out, "entropys": None}
        if isinstance(out, tuple):
            return {"log_probs": out[0], "entropys": out[1] if len(out) > 1 else None}
        return out

    @contextlib.contextmanager
    def _padding_helpers(self, needed: bool):
        """verl's remove-padding path takes unpad_input / pad_input / index_first_axis / rearrange from
        flash_attn.bert_padding (on NPUs from its own port, verl.utils.npu_flash_attn_utils). flash_attn
        builds only with CUDA: where it is absent, verl's own port serves under that name for the call."""
        if not needed or module_exists_anywhere("flash_attn.bert_padding"):
            yield
            return
        try:
            port = self._import("verl.utils.npu_flash_attn_utils")
        except Exception as e:  # noqa: BLE001 - an older verl without the port
            raise Unsupported(f"use_remove_padding: flash_attn is not installed and verl has no pure-torch port of "
                              f"its padding helpers at this version ({type(e).__name__})") from None
        if not all(hasattr(port, n) for n in _PADDING):
            raise Unsupported("use_remove_padding: flash_attn is not installed and verl's npu_flash_attn_utils lacks "
                              + ", ".join(n for n in _PADDING if not hasattr(port, n)))
        shim = types.ModuleType("flash_attn.bert_padding")
        shim.__dict__.update({n: getattr(port, n) for n in _PADDING})
        saved = {k: sys.modules.get(k) for k in ("flash_attn", "flash_attn.bert_padding")}
        sys.modules["flash_attn"] = types.ModuleType("flash_attn")
        sys.modules["flash_attn"].bert_padding = shim
        sys.modules["flash_attn.bert_padding"] = shim
        attention = self._import("verl.utils.attention_utils")
        cached = tuple(getattr(attention, n, None) for n in _CACHED)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
            for n, v in zip(_CACHED, cached):  # attention_utils caches what it imported: forget the port
                setattr(attention, n, v)

    def _fused_model(self, lm: torch.nn.Module, vlm: bool = False) -> torch.nn.Module:
        """The model under ``use_fused_kernels``: verl's own fused forward, installed by its
        ``patch_forward_with_backends`` (torch backend: ``FusedLinearForPPO``, a chunked log-softmax
        and entropy with its own backward, over the base model's hidden states and ``lm_head``), on
        `_FusedStandIn`, whose hidden states and head give back the drawn logits. A fresh class per
        call (verl patches the class). A VLM's (`vlm`) config is a Qwen2-VL's: verl installs its
        qwen2_vl forward."""
        try:
            patch = getattr(self._import(FUSED_PATCH), "patch_forward_with_backends", None)
        except ModuleNotFoundError as e:
            if e.name and FUSED_PATCH.startswith(e.name):
                raise Unsupported(f"use_fused_kernels: verl has no {FUSED_PATCH} at this version") from None
            raise
        if patch is None:
            raise Unsupported("use_fused_kernels: this verl has no patch_forward_with_backends (no torch backend)")
        if is_stub(sys.modules.get("transformers")):
            raise MissingDependency("use_fused_kernels: verl's fused forward (models/transformers/dense_common.py) "
                                    "imports transformers, which is not installed (pip install transformers; the trl extra has it)")
        logits = lm.table.logits
        model = type("FusedStandInLM", (_FusedStandIn,), {})(lm, int(logits.shape[-1]), logits.dtype)
        if vlm:
            self._qwen2_vl_patches()
            model.config = types.SimpleNamespace(**{**vars(model.config), **vars(vision_config())})
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the backend it chose
            patch(model, use_fused_kernels=True, fused_kernels_backend="torch")
        return model

    def _qwen2_vl_patches(self) -> None:
        """verl's qwen2_vl module, whose fused forward patch_forward_with_backends installs on a Qwen2-VL. It
        runs here where it imports whole (on transformers 5 with its output class given back:
        vlm.qwen2_vl_output_class) and hands the model the four channels the stand-in reads
        (process_position_ids keeps the text channel on transformers 4.54 and later; before 4.52 verl embeds
        through the model's own modules): elsewhere, this environment's transformers is not one it runs on."""
        import transformers
        if qwen2_vl_output_class() and QWEN2_VL in sys.modules:  # imported before against a stub of it
            importlib.reload(sys.modules[QWEN2_VL])
        try:
            mod = self._import(QWEN2_VL)
        except ImportError as e:
            if isinstance(e, ModuleNotFoundError) and e.name and QWEN2_VL.startswith(e.name):
                return  # no such module at this verl: its patch takes the dense forward
            lacking = str(e)
        else:  # what it imports from transformers that this transformers lacks: the shims' stubs
            lacking = ", ".join(n for n, v in vars(mod).items()
                                if is_stub(v) and str(getattr(v, "__module__", "")).startswith("transformers"))
        version = getattr(mod, "is_transformers_version_in_range", None) if not lacking else None
        if not lacking and (not hasattr(mod, "process_position_ids") or version is None
                            or not version(min_version="4.54.0")):
            lacking = "the four-channel position ids of transformers 4.54 and later"
        if lacking:
            raise MissingDependency(f"use_fused_kernels on a Qwen2-VL: verl's {QWEN2_VL} needs what transformers "
                                    f"{transformers.__version__} lacks ({lacking})")

    def _mrope_channels(self, fn) -> int:
        """The mrope position ids' channels at this verl: 4 where it feeds transformers' text-and-rope
        layout (qwen2_vl's process_position_ids, since 0d4541f3), else Qwen2-VL's 3 rope channels."""
        if "position_ids.dim() == 3" not in source_of(fn):
            raise Unsupported("mrope_position_ids: this verl's _forward_micro_batch has no 3-D (Qwen2-VL mrope) "
                              "position ids")
        qwen2_vl = Path(inspect.getfile(self.core)).parents[2] / "models" / "transformers" / "qwen2_vl.py"
        try:
            return 4 if "def process_position_ids" in qwen2_vl.read_text(errors="replace") else 3
        except OSError:
            return 3

    def _position_ids(self, mask: torch.Tensor) -> torch.Tensor:
        """verl's position ids of a padded batch, by its own function (what its rollout hands the actor)."""
        fn = getattr(self._import("verl.utils.model"), "compute_position_id_with_mask", None)
        if fn is None:
            raise Unsupported("verl has no verl.utils.model.compute_position_id_with_mask at this version")
        return fn(mask)
