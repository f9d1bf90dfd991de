"""What a PyTorch script's own structure tells the recorders: global module hooks (the module
stack, forward passes), optimizer step hooks (where steps end), and patches of the few library
calls that mark an iteration's shape (GradScaler.step/update, DataLoader.__next__,
Module.train after an evaluation, a custom autograd Function's apply), the script's own
`record_function` labels, and the attention fast path a NeuronCore does not have."""
from __future__ import annotations

import functools
import importlib
import threading
import time

from .phases import FORWARD, OPTIMIZER

_now = time.perf_counter_ns
# torch's own record_function labels for what the hooks record themselves
_OWN_LABELS = ("Optimizer.step#", "enumerate(DataLoader)#", "ProfilerStep#")


def _never() -> bool:
    return False


def _is_compiling(torch):
    """torch.compiler.is_compiling (torch 2.3 on), else Dynamo's own, else never."""
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if fn is None:
        try:
            from torch._dynamo import is_compiling as fn
        except ImportError:
            fn = _never
    return fn


class Hooks:
    """Global module and optimizer hooks feeding the recorder's module stack, phase and steps.

    The module hooks return at once when torch.compile's Dynamo is tracing them: Dynamo inlines
    global module hooks into the graph it builds, and the clocks and thread ids they read would
    make it give up on the frame (the script would silently run uncompiled). Traced, they do
    nothing, so a compiled region's modules get no spans of their own. The optimizer hooks always
    run, as steps end in them: in a compiled optimizer step Dynamo breaks its graph around them
    and the step's body still compiles.

    A step ends at an optimizer step, but several optimizers stepping in one iteration (one
    backward, an optimizer per parameter group) end one step: an optimizer that steps after
    another with no autograd graph built since, and has not stepped yet in that step, adds its
    work to the step the previous one ended.

    A GradScaler (torch.amp's, torch.cuda.amp's) is followed too. Its `step(optimizer)` ends the
    step even when it skips the optimizer's step (gradients with inf/NaN: the optimizer's hooks
    never run), so an overflowing iteration is a step of its own rather than merged into the
    next; the skip is a `GradScaler.step#<Optimizer> (skipped: inf/NaN gradients)` span. Its
    `update()` right after the step (no module's forward, no autograd graph since) goes back into
    the step just ended: it is that iteration's tail, not the next one's start.

    An evaluation between training steps is a step of its own: when a model that ran in eval
    mode (`module.training` False, as `model.eval()` sets it) since the last step ended, with no
    training forward of it since, is put back in training mode (`model.train()`) or starts a
    forward in it, the evaluation's step ends there. Before, it folded into the next training
    step. A different module run in eval mode (a frozen teacher, an EMA copy, a reference model)
    is part of the step it runs in.

    A custom autograd Function applied with gradients on is a forward pass as a module's forward
    is: its `apply` is a `python_function` span (`<Function>.apply`). Without it, a Function
    applied before any module's forward in a step (to the inputs) had its work labelled `other`
    by the native recorder, whose calls inside the Function's forward carry no autograd
    sequence number to tie them to the Function's backward."""

    def __init__(self, rec) -> None:      # rec: the recorder (recording.RecorderBase)
        self.rec = rec
        self.handles = []
        self.ids: dict[int, int] = {}
        self._compiling = _never
        self._graph_seq = _never          # autograd's sequence number (a counter of graph nodes)
        self._seq_at_step = None          # ... when an optimizer last ended a step
        self._stepped: set[int] = set()   # optimizers that stepped since
        self._joined = None               # this optimizer step joins the previous one's step
        self._checked = False             # ... already decided by the GradScaler.step around it
        self._opt_steps = 0               # optimizer steps run (their post hooks)
        self._tail_step = None            # the step the last optimizer step's end opened
        self._forward_since = False       # a module's forward began since a step ended
        self._scaler_busy = False         # inside a patched GradScaler method (subclasses nest)
        self._patched: list = []           # (owner, name, original attribute) patched
        self._compile_watch: list = []     # removers of Dynamo's compile callbacks, once set
        self._evaluated: set[int] = set()  # root modules run in eval mode since a step ended
        self._trained: set[int] = set()    # ... and in training mode

    def install(self) -> None:
        import torch
        mod = torch.nn.modules.module
        from torch.optim import optimizer as opt
        self._compiling = _is_compiling(torch)
        self._graph_seq = torch._C._autograd._get_sequence_nr
        self.handles = [mod.register_module_forward_pre_hook(self._pre),
                        mod.register_module_forward_hook(self._post),
                        opt.register_optimizer_step_pre_hook(self._opt_pre),
                        opt.register_optimizer_step_post_hook(self._opt_post)]
        self._patch_dataloader()
        self._patch_grad_scalers()
        self._patch_train(mod.Module)
        self._patch_function_apply(torch)
        self._patch_record_function(torch)
        self._patch_attention_fastpath(torch)
        self._patch_compile(torch)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        for remove in self._compile_watch:
            remove()
        self._compile_watch = []
        for owner, name, original in reversed(self._patched):
            setattr(owner, name, original)
        self._patched = []

    def _id(self, module) -> int:
        mid = self.ids.get(id(module))
        if mid is None:
            modules = self.rec.recording.modules
            root = type(module).__name__
            for sub_name, sub in module.named_modules():
                if id(sub) not in self.ids:
                    self.ids[id(sub)] = len(modules)
                    modules.append(f"{root}.{sub_name}" if sub_name else root)
            mid = self.ids[id(module)]
        return mid

    def _pre(self, module, args) -> None:
        if self._compiling():
            return
        rec = self.rec
        if not rec.module_stack:
            self._root_forward(module)
        self._forward_since = True
        mid = self._id(module)
        rec.module_stack.append((mid, _now()))
        rec.set_module(mid)

    def _post(self, module, args, output) -> None:
        if self._compiling():
            return
        rec = self.rec
        if rec.module_stack:
            mid, t0 = rec.module_stack.pop()
            if rec.keeps(rec.step):
                rec.recording.spans.append((rec.recording.modules[mid], "python_function",
                                            threading.get_ident(), t0, _now(), rec.step))
        rec.set_module(rec.module_stack[-1][0] if rec.module_stack else 0)

    def _root_forward(self, module) -> None:
        """A forward with no module's forward around it: an evaluation of this model since the
        step ended, and none of its training forwards, makes that evaluation a step (class
        docstring)."""
        key = id(module)
        if not module.training:
            self._evaluated.add(key)
            return
        self._end_evaluation(key)
        self._trained.add(key)

    def _end_evaluation(self, key: int) -> None:
        if key in self._evaluated and key not in self._trained and not self.rec.explicit_steps:
            self.rec.end_step()
            self._evaluated.clear()
            self._trained.clear()
            self._tail_step = None

    def _join(self, optimizer) -> None:
        """Whether this optimizer's step joins the step the previous one ended (reopening it)."""
        rec = self.rec
        self._joined = None
        if not rec.explicit_steps and self._seq_at_step == self._graph_seq() \
                and id(optimizer) not in self._stepped:
            self._joined = rec.reopen_step()

    def _opt_pre(self, optimizer, args, kwargs) -> None:
        rec = self.rec
        if not self._checked:
            self._join(optimizer)
        self._checked = False
        rec.set_phase(OPTIMIZER)
        rec.opt_t0 = _now()

    def _opt_post(self, optimizer, args, kwargs) -> None:
        rec = self.rec
        self._opt_steps += 1
        if rec.keeps(rec.step):
            rec.recording.spans.append((f"Optimizer.step#{type(optimizer).__name__}.step", "user_annotation",
                                        threading.get_ident(), rec.opt_t0, _now(), rec.step))
        rec.set_phase(FORWARD)
        self._end_iteration(optimizer)

    def _end_iteration(self, optimizer) -> None:
        """An optimizer stepped (or its GradScaler skipped it): end the step, or the step it joined."""
        rec = self.rec
        if rec.explicit_steps:
            return
        if self._joined is None:                 # a new iteration's first optimizer step
            self._stepped.clear()
        self._stepped.add(id(optimizer))
        self._seq_at_step = self._graph_seq()
        self._tail_step = None
        if self._joined is not False:            # False: joining was refused, the step stays open
            rec.end_step()
            self._tail_step = rec.step
            self._forward_since = False
            self._evaluated.clear()
            self._trained.clear()

    def _patch_grad_scalers(self) -> None:
        """Wrap GradScaler.step and .update (see the class docstring) on each GradScaler class
        that defines them: torch.amp's (torch 2.3 on; torch.cuda.amp's is a subclass of it) or,
        on older torch, torch.cuda.amp's own."""
        classes = []
        for module in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):
            try:
                classes.append(importlib.import_module(module).GradScaler)
            except (ImportError, AttributeError):
                continue
        for cls in classes:
            for name, wrap in (("step", self._wrap_scaler_step), ("update", self._wrap_scaler_update)):
                original = cls.__dict__.get(name)
                if callable(original):
                    wrapper = functools.wraps(original)(wrap(original))
                    wrapper.__wrapped_original__ = original
                    self._patch(cls, name, wrapper)

    def _patch(self, owner, name: str, replacement) -> None:
        """Set `owner.name` to `replacement`; `remove` puts back the owner's own attribute."""
        self._patched.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, replacement)

    def _wrap_scaler_step(self, original):
        hooks = self

        def step(scaler, optimizer, *args, **kwargs):
            rec = hooks.rec
            if hooks._scaler_busy or rec.explicit_steps or hooks._compiling():
                return original(scaler, optimizer, *args, **kwargs)
            hooks._scaler_busy = True
            t0 = _now()
            ran = hooks._opt_steps
            hooks._join(optimizer)          # before the scaler's own work (unscale_, the inf check)
            hooks._checked = True           # ... so the optimizer's pre hook does not decide again
            try:
                out = original(scaler, optimizer, *args, **kwargs)
            except BaseException:
                if hooks._opt_steps == ran and hooks._joined:
                    rec.end_step()          # the step reopened for it ends again where it did
                raise
            finally:
                hooks._scaler_busy = False
                hooks._checked = False
            if hooks._opt_steps == ran:     # skipped: the optimizer's hooks never ran
                if rec.keeps(rec.step):
                    rec.recording.spans.append((f"GradScaler.step#{type(optimizer).__name__} "
                                                "(skipped: inf/NaN gradients)", "user_annotation",
                                                threading.get_ident(), t0, _now(), rec.step))
                hooks._end_iteration(optimizer)
            return out
        return step

    def _wrap_scaler_update(self, original):
        hooks = self

        def update(scaler, *args, **kwargs):
            rec = hooks.rec
            if hooks._scaler_busy or rec.explicit_steps or hooks._compiling():
                return original(scaler, *args, **kwargs)
            reopened = (hooks._tail_step == rec.step and not hooks._forward_since
                        and hooks._seq_at_step == hooks._graph_seq() and rec.reopen_step())
            hooks._scaler_busy = True
            try:
                return original(scaler, *args, **kwargs)
            finally:
                hooks._scaler_busy = False
                if reopened:
                    rec.end_step()
                    hooks._tail_step = rec.step
        return update

    def _patch_train(self, cls) -> None:
        """`Module.train(True)` on a model evaluated since the step ended ends the evaluation's
        step (class docstring), so the next iteration's data loading is not the evaluation's."""
        original = cls.train

        @functools.wraps(original)
        def train(module, mode=True):
            if mode and not module.training and not self._compiling():
                self._end_evaluation(id(module))
            return original(module, mode)
        train.__wrapped_original__ = original
        self._patch(cls, "train", train)

    def _patch_function_apply(self, torch) -> None:
        """`Function.apply` (a classmethod every custom autograd Function inherits) records a
        span when gradients are on (class docstring). Dynamo recognises `apply` by its name, so
        a compiled region's Functions compile as before."""
        cls = torch.autograd.Function
        raw = cls.__dict__.get("apply")
        if not isinstance(raw, classmethod):      # another torch's layout: leave it alone
            return
        original, rec, grad_enabled = raw.__func__, self.rec, torch.is_grad_enabled

        @functools.wraps(original)
        def apply(fn_cls, *args, **kwargs):
            if self._compiling() or not grad_enabled() or not rec.keeps(rec.step):
                return original(fn_cls, *args, **kwargs)
            t0 = _now()
            try:
                return original(fn_cls, *args, **kwargs)
            finally:
                rec.recording.spans.append((f"{fn_cls.__name__}.apply", "python_function",
                                            threading.get_ident(), t0, _now(), rec.step))
        apply.__wrapped_original__ = original
        self._patch(cls, "apply", classmethod(apply))

    def _patch_record_function(self, torch) -> None:
        """A `with record_function("label"):` (or its decorator form) in the script is a
        `user_annotation` span, as torch.profiler shows it. Torch's own labels for what the
        other hooks already record (an optimizer's step, a DataLoader's next batch) and its
        `ProfilerStep#N` are left out: they would be there twice."""
        cls = getattr(getattr(torch.autograd, "profiler", None), "record_function", None)
        if cls is None or "__enter__" not in cls.__dict__ or "__exit__" not in cls.__dict__:
            return
        enter, exit_, rec = cls.__dict__["__enter__"], cls.__dict__["__exit__"], self.rec
        # id of an entered record_function -> its start and the step it began in (a label
        # around an iteration ends after optimizer.step() ended that step: it is that step's)
        started: dict[int, tuple[int, int]] = {}

        @functools.wraps(enter)
        def entered(fn, *args, **kwargs):
            if not self._compiling() and not str(getattr(fn, "name", "")).startswith(_OWN_LABELS):
                started[id(fn)] = (_now(), rec.step)
            return enter(fn, *args, **kwargs)

        @functools.wraps(exit_)
        def exited(fn, *args, **kwargs):
            try:
                return exit_(fn, *args, **kwargs)
            finally:
                t0, step = started.pop(id(fn), (None, 0))
                if t0 is not None and rec.keeps(step):
                    rec.recording.spans.append((str(fn.name), "user_annotation",
                                                threading.get_ident(), t0, _now(), step))
        entered.__wrapped_original__, exited.__wrapped_original__ = enter, exit_
        self._patch(cls, "__enter__", entered)
        self._patch(cls, "__exit__", exited)

    def _patch_attention_fastpath(self, torch) -> None:
        """In inference, nn.MultiheadAttention and nn.TransformerEncoderLayer run one fused CPU
        or CUDA kernel (`_transformer_encoder_layer_fwd`, `_native_multi_head_attention`) that a
        NeuronCore never runs: on an XLA device they take the layer-by-layer path. The capture
        takes that path too, so both recorders see the matmuls and softmax the chip would run
        (the Python recorder saw one call of no FLOPs)."""
        mha = getattr(torch.backends, "mha", None)
        if mha is not None and "get_fastpath_enabled" in vars(mha):
            self._patch(mha, "get_fastpath_enabled", _never)

    def _patch_compile(self, torch) -> None:
        """Dynamo and Inductor run real tensor ops while they compile (AOTAutograd traces the
        backward with zeros and clones; a cold Inductor cache benchmarks kernels): work of the
        compiler, not of the model, and absent when the cache is warm. Once the script first
        calls torch.compile, Dynamo's compile start and end callbacks pause the recorder around
        each compilation (the forward's, and the backward's that AOTAutograd compiles later).
        Waiting for that call keeps Dynamo's import (a second) off scripts that never compile."""
        original = vars(torch).get("compile")
        if original is None:
            return
        hooks = self

        def compile_(*args, **kwargs):
            if not hooks._compile_watch:
                hooks._watch_compiles()
            return original(*args, **kwargs)
        self._patch(torch, "compile", compile_)

    def _watch_compiles(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:           # a torch without compile callbacks: nothing to pause on
            return
        rec = self.rec

        def started(*_):
            rec.pause_for_compile(True)

        def ended(*_):
            rec.pause_for_compile(False)
        callback_handler.register_start_callback(started)
        callback_handler.register_end_callback(ended)
        self._compile_watch = [lambda: callback_handler.remove_start_callback(started),
                               lambda: callback_handler.remove_end_callback(ended)]

    def _patch_dataloader(self) -> None:
        from torch.utils.data import dataloader
        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        rec = self.rec

        def timed_next(it):
            if self._compiling():
                return original(it)
            t0 = _now()
            try:
                return original(it)
            finally:
                if rec.keeps(rec.step):
                    rec.recording.spans.append(("DataLoader.__next__", "data_loading", threading.get_ident(),
                                                t0, _now(), rec.step))
        timed_next.__wrapped_original__ = original
        self._patch(cls, "__next__", timed_next)
