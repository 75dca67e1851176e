"""Small torch model families for the tensor workloads of pvldb Fig. 6.

Every net is a :class:`ZooModule`: it takes a float32 batch in the user's
layout and permutes internally.

=============================  ==================  ======================
workload                       input batch         output
=============================  ==================  ======================
tensor classification          (N, H, W, C)        logits (N, D)
                               or (N, H, W)
time-series classification     (N, T, A)           logits (N, D)
time-series translation        (N, T, A)           (N, T', B)
tensor recovery                (N, H, W, C)        (N, *output_shape)
=============================  ==================  ======================

Nets are sized by the input shape: image nets use one 2x downsampling stage
per factor of two above 4 pixels on the shorter side, so an 8x8 digit gets
one stage and a 32x32 image three; inputs larger than 32 pixels
are average-pooled down to 32 first. They are small enough to train on a CPU in
seconds on a few thousand examples.

How execution uses a net (one config, one MOP unit)::

    torch.manual_seed(seed)
    net = candidate.build(config)            # fresh, untrained
    net.adapt(X_train, Y_train)              # input/target statistics -> buffers
    opt = net.make_optimizer(config.options["lr"])
    for xb, yb in batches:
        net.train_step(opt, xb, yb)          # forward, loss, backward, clip, step -> loss tensor
    y_hat = net.predict(X_val)               # class indices, or outputs

``adapt`` stores statistics as buffers, so they travel in the state dict with
the weights when a model hops between workers. A net trains on the device of
its weights (``net.to(device)``): ``train_step`` and ``predict`` move their
batch there, and ``train_step`` returns the loss as a device tensor so that a
training loop need not wait for the device at every step.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, ContextManager, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ease_jupyter.errors import DataError, EaseMLError
from ease_jupyter.zoo.normalization import fk_normalize

__all__ = [
    "ZooModule",
    "ImageClassifier",
    "LeNet",
    "SmallResNet",
    "SmallVGG",
    "MobileNetLite",
    "SeriesClassifier",
    "Conv1DNet",
    "RNNClassifier",
    "Seq2Seq",
    "RecoveryNet",
    "ConvAutoencoder",
    "UNet",
    "image_plan",
]


def _as_tensor(a: Any, device: torch.device | None = None) -> torch.Tensor:
    """A float32 tensor; a tensor keeps its device, other data go to ``device``
    (default: the CPU)."""
    if isinstance(a, torch.Tensor):
        return a.detach().to(torch.float32)
    return torch.as_tensor(np.asarray(a, dtype=np.float32), device=device)


class ZooModule(nn.Module):
    """Base class of every zoo net.

    Attributes:
        input_shape: one example's shape in the user's layout (without N);
            for sequences the trailing feature size only, ``(A,)``.
        output_shape: one example's output shape, ``(D,)`` for classifiers.
        task: ``"classification"`` (logits, cross-entropy) or
            ``"regression"`` (outputs, mean squared error).
    """

    task: str = "classification"

    def __init__(self, input_shape: Sequence[int], output_shape: Sequence[int]):
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        self.output_shape = tuple(int(s) for s in output_shape)

    # -- data statistics -------------------------------------------------
    def adapt(self, X: Any, Y: Any = None) -> "ZooModule":
        """Store input (and, for regression, target) statistics from the
        training data in buffers. Call once, before training. Returns self."""
        return self

    # -- training --------------------------------------------------------
    def fit_forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The forward pass used in training (``y`` may fix output lengths)."""
        return self(x)

    def loss(self, out: torch.Tensor, y: Any) -> torch.Tensor:
        """Cross-entropy on logits; ``y`` holds class indices (N,) or one-hot /
        probability rows (N, D)."""
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y), device=out.device)
        if y.dim() == 2 and y.shape == out.shape:
            return F.cross_entropy(out, y.to(out.dtype))
        return F.cross_entropy(out, y.reshape(-1).long())

    def make_optimizer(self, lr: float, *, momentum: float = 0.9, weight_decay: float = 0.0) -> torch.optim.Optimizer:
        """Plain SGD with momentum: the learning rate is the one tuned option
        (pvldb §3.1, "Discussion: Hyperparameter Tuning")."""
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise EaseMLError(f"lr: found {lr!r}, expected a positive finite number")
        return torch.optim.SGD(self.parameters(), lr=float(lr), momentum=momentum, weight_decay=weight_decay)

    @property
    def device(self) -> torch.device:
        """The device of the net's weights (the CPU for a net without any)."""
        for t in self.parameters():
            return t.device
        for t in self.buffers():
            return t.device
        return torch.device("cpu")

    def train_step(
        self,
        optimizer: torch.optim.Optimizer,
        x: Any,
        y: Any,
        *,
        clip: float | None = 5.0,
        autocast: Callable[[], ContextManager[Any]] | None = None,
        scaler: Any = None,
    ) -> torch.Tensor:
        """One SGD step on a batch; returns the batch loss before the step, as
        a detached 0-d tensor on the net's device (reading it as a number
        waits for the device, so a training loop sums tensors and reads once).

        Gradients are clipped to norm ``clip`` so that lr=0.1 does not make
        recurrent nets blow up. ``autocast`` makes the context of the forward
        pass and the loss (mixed precision); ``scaler``, a
        ``torch.amp.GradScaler``, scales the loss for float16 and unscales the
        gradients before clipping.
        """
        self.train()
        device = self.device
        x = _as_tensor(x, device).to(device)
        y_t = (y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))).to(device)
        optimizer.zero_grad(set_to_none=True)
        with autocast() if autocast is not None else contextlib.nullcontext():
            out = self.fit_forward(x, y_t)
            loss = self.loss(out, y_t)
        if scaler is not None:
            scaler.scale(loss).backward()
            if clip is not None:
                scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(self.parameters(), clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(self.parameters(), clip)
            optimizer.step()
        return loss.detach()

    @torch.no_grad()
    def predict(self, x: Any) -> torch.Tensor:
        """Class indices (classification) or outputs (regression), in eval
        mode, computed on the net's device (and returned there)."""
        was_training = self.training
        self.eval()
        device = self.device
        try:
            out = self(_as_tensor(x, device).to(device))
        finally:
            self.train(was_training)
        return out.argmax(dim=1) if self.task == "classification" else out

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ---------------------------------------------------------------------------
# Tensor (image) classification
# ---------------------------------------------------------------------------


def image_hwc(shape: Sequence[int]) -> tuple[int, int, int]:
    """``[H, W, C]`` or ``[H, W]`` (C = 1) as a triple."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 2:
        return shape[0], shape[1], 1
    if len(shape) == 3:
        return shape  # type: ignore[return-value]
    raise EaseMLError(f"image shape: found {list(shape)}, expected [H, W, C] or [H, W]")


#: Images whose shorter side exceeds this are average-pooled first (CPU budget).
MAX_WORKING_SIDE = 32


def image_plan(h: int, w: int, max_stages: int = 4) -> tuple[int, int]:
    """(pre-pooling factor, number of 2x downsampling stages) for an image.

    Inputs with a shorter side above :data:`MAX_WORKING_SIDE` are
    average-pooled by a power of two (at most 8) first, so 64x64 is seen at
    32x32; then one stage per factor of two above 4 pixels:
    8 -> 1 stage, 16 -> 2, 28 -> 2, 32 (and 64) -> 3.
    """
    m = min(h, w)
    pool = 1
    while m / pool > MAX_WORKING_SIDE and pool < 8:
        pool *= 2
    m = math.ceil(m / pool)
    stages = int(math.floor(math.log2(m / 4))) if m >= 4 else 0
    return pool, max(0, min(max_stages, stages))


def _ceil_halve(n: int, times: int) -> int:
    for _ in range(times):
        n = (n + 1) // 2
    return n


class _StandardizedInput(ZooModule):
    """Per-feature (last axis) standardisation of the input, learned by adapt."""

    def __init__(self, input_shape: Sequence[int], output_shape: Sequence[int], n_features: int):
        super().__init__(input_shape, output_shape)
        self.register_buffer("in_mean", torch.zeros(n_features))
        self.register_buffer("in_std", torch.ones(n_features))

    def adapt(self, X: Any, Y: Any = None) -> "ZooModule":
        x = _as_tensor(X)
        n = self.in_mean.numel()
        if x.numel() == 0 or x.shape[-1] != n and not (n == 1 and x.dim() >= 1):
            raise DataError("X", f"shape {tuple(x.shape)}", f"a non-empty batch with {n} features on the last axis")
        flat = x.reshape(-1, n)
        std = flat.std(dim=0, unbiased=False)
        self.in_mean.copy_(flat.mean(dim=0))
        self.in_std.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))
        return self

    def _standardize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.in_mean) / self.in_std


class ImageClassifier(_StandardizedInput):
    """Base of the image classifiers: standardise per channel, NHWC -> NCHW,
    optional pre-pooling, then ``self.features`` and ``self.head``."""

    family = "cnn"

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        h, w, c = image_hwc(input_shape)
        super().__init__(input_shape, (num_classes,), c)
        self.h, self.w, self.c = h, w, c
        self.pool_factor, self.stages = image_plan(h, w)
        self.prepool: nn.Module = (
            nn.AvgPool2d(self.pool_factor, ceil_mode=True) if self.pool_factor > 1 else nn.Identity()
        )
        self.work_h = math.ceil(h / self.pool_factor)
        self.work_w = math.ceil(w / self.pool_factor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], self.h, self.w, self.c)
        x = self._standardize(x).permute(0, 3, 1, 2).contiguous()
        return self.head(self.features(self.prepool(x)))


class LeNet(ImageClassifier):
    """LeNet-5 style: 5x5 conv + ReLU + 2x max-pool per stage, then three
    fully connected layers (120, 84, D)."""

    family = "lenet"

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__(input_shape, num_classes)
        widths = [6, 16, 32, 64][: max(1, self.stages)]
        layers: list[nn.Module] = []
        cin = self.c
        for i, cout in enumerate(widths):
            layers += [nn.Conv2d(cin, cout, 5, padding=2), nn.ReLU(inplace=True)]
            if i < self.stages:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            cin = cout
        self.features = nn.Sequential(*layers)
        fh, fw = _ceil_halve(self.work_h, self.stages), _ceil_halve(self.work_w, self.stages)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(cin * fh * fw, 120),
            nn.ReLU(inplace=True),
            nn.Linear(120, 84),
            nn.ReLU(inplace=True),
            nn.Linear(84, num_classes),
        )


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        act(inplace=True),
    )


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv-BN, identity (or 1x1 projection) skip."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.skip(x), inplace=True)


def _global_head(c: int, num_classes: int) -> nn.Sequential:
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, num_classes))


class SmallResNet(ImageClassifier):
    """A ResNet with one basic block per stage: an 8-channel 3x3 stem and block,
    then one strided block per downsampling stage (channels 16, 32, 64, 128),
    global average pooling and a linear head."""

    family = "resnet"

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__(input_shape, num_classes)
        widths = [8, 16, 32, 64, 128]
        layers: list[nn.Module] = [_conv_bn(self.c, widths[0]), BasicBlock(widths[0], widths[0])]
        for i in range(self.stages):
            layers.append(BasicBlock(widths[i], widths[i + 1], stride=2))
        self.features = nn.Sequential(*layers)
        self.head = _global_head(widths[self.stages], num_classes)


class SmallVGG(ImageClassifier):
    """VGG style: two 3x3 conv-BN-ReLU then a 2x max-pool per stage (channels
    8, 16, 32, 64), then a 2x2 adaptive pool and two fully connected layers."""

    family = "vgg"

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__(input_shape, num_classes)
        widths = [8, 16, 32, 64][: max(1, self.stages)]
        layers: list[nn.Module] = []
        cin = self.c
        for i, cout in enumerate(widths):
            layers += [_conv_bn(cin, cout), _conv_bn(cout, cout)]
            if i < self.stages:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(cin * 4, 128),
            nn.ReLU(inplace=True),
            nn.Linear(128, num_classes),
        )


class DepthwiseSeparable(nn.Sequential):
    """MobileNet block: 3x3 depthwise conv-BN-ReLU6, 1x1 pointwise conv-BN-ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__(
            _conv_bn(cin, cin, 3, stride=stride, groups=cin, act=nn.ReLU6),
            _conv_bn(cin, cout, 1, act=nn.ReLU6),
        )


class MobileNetLite(ImageClassifier):
    """MobileNet (v1) style: an 8-channel 3x3 stem, one depthwise-separable
    block (16), then one strided depthwise-separable block per downsampling
    stage (32, 64, 128, 128)."""

    family = "mobilenet"

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__(input_shape, num_classes)
        widths = [16, 32, 64, 128, 128]
        layers: list[nn.Module] = [_conv_bn(self.c, 8, act=nn.ReLU6), DepthwiseSeparable(8, widths[0])]
        for i in range(self.stages):
            layers.append(DepthwiseSeparable(widths[i], widths[i + 1], stride=2))
        self.features = nn.Sequential(*layers)
        self.head = _global_head(widths[self.stages], num_classes)


# ---------------------------------------------------------------------------
# Time series
# ---------------------------------------------------------------------------


class SeriesClassifier(_StandardizedInput):
    """Base of the sequence classifiers: input (N, T, A), standardised per feature."""

    def __init__(self, n_features: int, num_classes: int):
        super().__init__((n_features,), (num_classes,), n_features)
        self.n_features = n_features

    def _prep(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.n_features:
            raise DataError("X", f"batch shape {tuple(x.shape)}", f"(N, T, {self.n_features})")
        return self._standardize(x)


class Conv1DNet(SeriesClassifier):
    """Three 1-D conv-BN-ReLU layers over time (32, 64, 64 channels), global
    average pooling over time, linear head. Works for any length T."""

    family = "cnn1d"

    def __init__(self, n_features: int, num_classes: int):
        super().__init__(n_features, num_classes)

        def block(cin: int, cout: int, k: int) -> list[nn.Module]:
            return [nn.Conv1d(cin, cout, k, padding=k // 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(*block(n_features, 32, 5), *block(32, 64, 5), *block(64, 64, 3))
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.features(self._prep(x).transpose(1, 2))
        return self.head(z.mean(dim=2))


_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


class RNNClassifier(SeriesClassifier):
    """A one-layer GRU or (bi-)LSTM with 64 hidden units; the final hidden
    state(s) feed a linear head."""

    def __init__(self, n_features: int, num_classes: int, cell: str = "gru", bidirectional: bool = False, hidden: int = 64):
        super().__init__(n_features, num_classes)
        if cell not in _CELLS:
            raise EaseMLError(f"cell: found {cell!r}, expected one of {sorted(_CELLS)}")
        self.cell, self.bidirectional = cell, bidirectional
        self.family = ("bi" if bidirectional else "") + cell
        self.rnn = _CELLS[cell](n_features, hidden, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(self._prep(x))
        if isinstance(h, tuple):  # LSTM: (h_n, c_n)
            h = h[0]
        # h: (directions, N, hidden) -> (N, directions * hidden)
        return self.head(h.transpose(0, 1).reshape(x.shape[0], -1))


class Seq2Seq(ZooModule):
    """Encoder-decoder RNN for time-series "translation" (Fig. 6, seq2seq).

    The encoder reads (N, T, A); its final state initialises a decoder that
    receives the encoder's summary at every one of T' steps and emits (N, T', B).
    T' is the target length seen by :meth:`adapt` (or by training batches),
    else T. Inputs and targets are standardised per feature with statistics
    from :meth:`adapt`; the loss is the MSE in standardised target units.
    """

    task = "regression"

    def __init__(self, n_features: int, out_features: int, cell: str = "gru", hidden: int = 64):
        super().__init__((n_features,), (out_features,))
        if cell not in _CELLS:
            raise EaseMLError(f"cell: found {cell!r}, expected one of {sorted(_CELLS)}")
        self.family = "seq2seq_" + cell
        self.n_features, self.out_features = n_features, out_features
        self.encoder = _CELLS[cell](n_features, hidden, batch_first=True)
        self.decoder = _CELLS[cell](hidden, hidden, batch_first=True)
        self.head = nn.Linear(hidden, out_features)
        self.register_buffer("in_mean", torch.zeros(n_features))
        self.register_buffer("in_std", torch.ones(n_features))
        self.register_buffer("out_mean", torch.zeros(out_features))
        self.register_buffer("out_std", torch.ones(out_features))
        self.register_buffer("out_steps", torch.zeros((), dtype=torch.long))  # 0: same as input

    @staticmethod
    def _stats(a: torch.Tensor, n: int, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        if a.dim() != 3 or a.shape[-1] != n or a.numel() == 0:
            raise DataError(name, f"shape {tuple(a.shape)}", f"a non-empty (N, T, {n}) array")
        flat = a.reshape(-1, n)
        std = flat.std(dim=0, unbiased=False)
        return flat.mean(dim=0), torch.where(std > 1e-6, std, torch.ones_like(std))

    def adapt(self, X: Any, Y: Any = None) -> "ZooModule":
        m, s = self._stats(_as_tensor(X), self.n_features, "X")
        self.in_mean.copy_(m)
        self.in_std.copy_(s)
        if Y is not None:
            y = _as_tensor(Y)
            m, s = self._stats(y, self.out_features, "Y")
            self.out_mean.copy_(m)
            self.out_std.copy_(s)
            self.out_steps.fill_(y.shape[1])
        return self

    def forward(self, x: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.n_features:
            raise DataError("X", f"batch shape {tuple(x.shape)}", f"(N, T, {self.n_features})")
        steps = int(steps or int(self.out_steps) or x.shape[1])
        enc_out, state = self.encoder((x - self.in_mean) / self.in_std)
        summary = enc_out[:, -1:, :].expand(-1, steps, -1).contiguous()
        dec_out, _ = self.decoder(summary, state)
        return self.head(dec_out) * self.out_std + self.out_mean

    def fit_forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self(x, steps=y.shape[1])

    def loss(self, out: torch.Tensor, y: Any) -> torch.Tensor:
        y = _as_tensor(y, out.device)
        return F.mse_loss((out - self.out_mean) / self.out_std, (y - self.out_mean) / self.out_std)


# ---------------------------------------------------------------------------
# Tensor recovery
# ---------------------------------------------------------------------------


class RecoveryNet(ZooModule):
    """Base of the image-to-image nets (Fig. 6, tensor "recovery").

    forward: scale the input to [0, 1] with the range seen by :meth:`adapt`
    (clipped), apply the augmentation's normalisation ``4 * f_k`` (so it spans
    [0, 1] again), run ``self.body`` to (N, C', h, w), resize to the output's
    (H', W') bilinearly if they differ, squash with a sigmoid into the [0, 1]
    target scale and map back to the target range seen by ``adapt``. The loss
    is the MSE in that shared [0, 1] target scale, so configs with different
    k are compared in one space and f_k is never inverted (see
    ``ease_jupyter.zoo.normalization``).
    """

    task = "regression"

    def __init__(self, input_shape: Sequence[int], output_shape: Sequence[int], norm_k: int = 1):
        super().__init__(input_shape, output_shape)
        self.h, self.w, self.c = image_hwc(input_shape)
        self.oh, self.ow, self.oc = image_hwc(output_shape)
        fk_normalize(0.0, norm_k)  # validates k
        self.norm_k = int(norm_k)
        self.pool_factor, _ = image_plan(self.h, self.w)
        self.prepool: nn.Module = (
            nn.AvgPool2d(self.pool_factor, ceil_mode=True) if self.pool_factor > 1 else nn.Identity()
        )
        self.work_h = math.ceil(self.h / self.pool_factor)
        self.work_w = math.ceil(self.w / self.pool_factor)
        _, self.levels = image_plan(self.work_h, self.work_w, max_stages=3)
        for name, value in (("in_lo", 0.0), ("in_hi", 1.0), ("out_lo", 0.0), ("out_hi", 1.0)):
            self.register_buffer(name, torch.tensor(value))

    def adapt(self, X: Any, Y: Any = None) -> "ZooModule":
        x = _as_tensor(X)
        if x.numel() == 0:
            raise DataError("X", "an empty array", "at least one example")
        self.in_lo.fill_(float(x.min()))
        self.in_hi.fill_(float(x.max()))
        if Y is not None:
            y = _as_tensor(Y)
            if y.numel() == 0:
                raise DataError("Y", "an empty array", "at least one example")
            self.out_lo.fill_(float(y.min()))
            self.out_hi.fill_(float(y.max()))
        return self

    @staticmethod
    def _span(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        return torch.clamp(hi - lo, min=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        x = x.reshape(n, self.h, self.w, self.c)
        x01 = torch.clamp((x - self.in_lo) / self._span(self.in_lo, self.in_hi), 0.0, 1.0)
        z = 4.0 * fk_normalize(x01, self.norm_k)
        z = self.prepool(z.permute(0, 3, 1, 2).contiguous())
        y = self.body(z)
        if y.shape[-2:] != (self.oh, self.ow):
            y = F.interpolate(y, size=(self.oh, self.ow), mode="bilinear", align_corners=False)
        y01 = torch.sigmoid(y)
        y = self.out_lo + y01 * self._span(self.out_lo, self.out_hi)
        return y.permute(0, 2, 3, 1).reshape(n, *self.output_shape)

    def loss(self, out: torch.Tensor, y: Any) -> torch.Tensor:
        y = _as_tensor(y, out.device).reshape(out.shape)
        span = self._span(self.out_lo, self.out_hi)
        return F.mse_loss((out - self.out_lo) / span, (y - self.out_lo) / span)


class ConvAutoencoder(RecoveryNet):
    """Strided 3x3 conv encoder (8, 16, 32, 64 channels, one level per stage),
    a 3x3 bottleneck, and a transposed-conv decoder back to full size."""

    family = "autoencoder"

    def __init__(self, input_shape: Sequence[int], output_shape: Sequence[int], norm_k: int = 1):
        super().__init__(input_shape, output_shape, norm_k)
        widths = [8, 16, 32, 64]
        layers: list[nn.Module] = [_conv_bn(self.c, widths[0])]
        for i in range(self.levels):
            layers.append(_conv_bn(widths[i], widths[i + 1], stride=2))
        layers.append(_conv_bn(widths[self.levels], widths[self.levels]))
        for i in reversed(range(self.levels)):
            layers += [
                nn.ConvTranspose2d(widths[i + 1], widths[i], 4, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(widths[i]),
                nn.ReLU(inplace=True),
            ]
        layers.append(nn.Conv2d(widths[0], self.oc, 3, padding=1))
        self.body = nn.Sequential(*layers)


class _UNetBody(nn.Module):
    def __init__(self, cin: int, cout: int, levels: int, widths: Sequence[int] = (8, 16, 32, 64)):
        super().__init__()
        self.levels = levels
        self.down = nn.ModuleList([nn.Sequential(_conv_bn(cin, widths[0]), _conv_bn(widths[0], widths[0]))])
        for i in range(1, levels + 1):
            self.down.append(nn.Sequential(_conv_bn(widths[i - 1], widths[i]), _conv_bn(widths[i], widths[i])))
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for i in reversed(range(1, levels + 1)):
            self.up.append(nn.ConvTranspose2d(widths[i], widths[i - 1], 2, stride=2))
            self.merge.append(nn.Sequential(_conv_bn(2 * widths[i - 1], widths[i - 1]), _conv_bn(widths[i - 1], widths[i - 1])))
        self.out = nn.Conv2d(widths[0], cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            if i > 0:
                x = F.max_pool2d(x, 2, ceil_mode=True)
            x = block(x)
            skips.append(x)
        skips.pop()
        for up, merge in zip(self.up, self.merge):
            skip = skips.pop()
            x = up(x)
            if x.shape[-2:] != skip.shape[-2:]:  # odd sizes: ceil pooling overshoots by one
                x = x[..., : skip.shape[-2], : skip.shape[-1]]
            x = merge(torch.cat([x, skip], dim=1))
        return self.out(x)


class UNet(RecoveryNet):
    """A small U-Net: double 3x3 conv-BN-ReLU blocks (8, 16, 32, 64 channels),
    2x max-pool down, transposed conv up, skip concatenation at each level."""

    family = "unet"

    def __init__(self, input_shape: Sequence[int], output_shape: Sequence[int], norm_k: int = 1):
        super().__init__(input_shape, output_shape, norm_k)
        self.body = _UNetBody(self.c, self.oc, self.levels)
