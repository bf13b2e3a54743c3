"""Every cfg key Darknet reads for the sections this package builds, and what this package does with each.

The truth is Darknet's own parser (AlexeyAB/darknet, ``src/parser.c`` at commit 59596d7, 2025-12-15), read function
by function: ``parse_net_options`` and ``parse_network_cfg_custom`` ([net] and the keys read for every layer),
``parse_convolutional``, ``parse_route``, ``parse_maxpool``, ``parse_upsample``, ``parse_yolo``. Each key is

* ``HONOURED``: it changes what Darknet computes at inference, and this package computes the same;
* ``IGNORED``: accepted and without effect here: training, memory or logging settings that leave Darknet's
  detections unchanged (``note`` says what Darknet does with it);
* ``UNSUPPORTED``: it changes Darknet's inference in a way this package does not implement. It is refused with
  ``"... is a Darknet key this package does not support (...)"``, except at ``noop`` -- Darknet's default, a
  value without effect -- which is accepted (``new_coords=0`` is the same network as no ``new_coords``).

Section types Darknet knows but this package does not build are in :data:`UNSUPPORTED_LAYERS`; activations in
:data:`DARKNET_ACTIVATIONS`. ``docs/darknet.md`` is the readable form of these tables. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

HONOURED, IGNORED, UNSUPPORTED = "honoured", "ignored", "unsupported"

#: Section names as Darknet spells them (parser.c string_to_layer_type) -> the name this package uses.
SECTION_ALIASES = {"conv": "convolutional", "max": "maxpool"}


@dataclass(frozen=True)
class DarknetKey:
    """One key Darknet's parser reads.

    Attributes:
        type: how the value parses: ``int``, ``float``, ``str``, ``ints`` or ``floats`` (comma-separated).
        use: :data:`HONOURED`, :data:`IGNORED` or :data:`UNSUPPORTED`.
        source: the Darknet file and function that reads it.
        note: what the key does in Darknet.
        noop: for an unsupported key, Darknet's default (a value without effect, accepted); None: never accepted.
    """

    type: str
    use: str
    source: str
    note: str = ""
    noop: str | None = None


def _keys(source: str, use: str, table: dict[str, tuple[str, str]]) -> dict[str, DarknetKey]:
    return {k: DarknetKey(t, use, source, note) for k, (t, note) in table.items()}


def _unsupported(source: str, table: dict[str, tuple[str, str | None, str]]) -> dict[str, DarknetKey]:
    return {k: DarknetKey(t, UNSUPPORTED, source, note, noop) for k, (t, noop, note) in table.items()}


_NET = "parser.c parse_net_options"
_ANY_LAYER = "parser.c parse_network_cfg_custom"
_CONV = "parser.c parse_convolutional"
_MAXPOOL = "parser.c parse_maxpool"
_YOLO = "parser.c parse_yolo"
_TRAIN = "training only"

NET_KEYS: dict[str, DarknetKey] = {
    **_keys(_NET, HONOURED, {
        "width": ("int", "network input width, pixels"),
        "height": ("int", "network input height, pixels"),
        "channels": ("int", "input channels"),
        "letter_box": ("int", ("1: letterbox the image (image.c letterbox_image, boxes mapped back by yolo_layer.c "
                               "correct_yolo_boxes); 0: plain resize (default)")),
    }),
    **_keys(_NET, IGNORED, {
        **{k: ("int", _TRAIN) for k in (
            "batch", "subdivisions", "max_batches", "burn_in", "step", "sgdr_cycle", "sgdr_mult", "time_steps",
            "track", "augment_speed", "sequential_subdivisions", "weights_reject_freq", "equidistant_point",
            "dynamic_minibatch", "adam", "max_crop", "min_crop", "flip", "blur", "gaussian_noise", "mixup", "cutmix",
            "mosaic", "mosaic_bound", "contrastive", "contrastive_jit_flip", "contrastive_color", "unsupervised",
            "attention")},
        **{k: ("float", _TRAIN) for k in (
            "learning_rate", "learning_rate_min", "momentum", "decay", "badlabels_rejection_percentage",
            "num_sigmas_reject_badlabels", "ema_alpha", "loss_scale", "B1", "B2", "eps", "label_smooth_eps",
            "resize_step", "adversarial_lr", "max_chart_loss", "angle", "aspect", "saturation", "exposure", "hue",
            "power", "scale", "gamma")},
        "steps": ("ints", _TRAIN), "scales": ("floats", _TRAIN), "seq_scales": ("floats", _TRAIN),
        "policy": ("str", _TRAIN),
        "inputs": ("int", "input size of a network without width/height/channels (which this package requires)"),
        "try_fix_nan": ("int", "replaces NaN/inf conv outputs by 0; a finite output is unchanged"),
        "use_cuda_graph": ("int", "GPU execution detail"),
        "optimized_memory": ("int", "GPU memory layout for training"),
        "workspace_size_limit_MB": ("float", "cuDNN workspace size"),
    }),
    "show_receptive_field": DarknetKey("float", IGNORED, _ANY_LAYER, "prints each layer's receptive field"),
}

#: Read for every layer section, after the section's own parser (parser.c parse_network_cfg_custom).
ANY_LAYER_KEYS: dict[str, DarknetKey] = _keys(_ANY_LAYER, IGNORED, {
    "clip": ("float", "training: clamps the weights after each update"),
    "onlyforward": ("int", "training: no backward pass for this layer"),
    "dont_update": ("int", "training: no weight update before this iteration"),
    "burnin_update": ("int", "training: no weight update during burn-in"),
    "stopbackward": ("int", "training: freezes this layer and the ones before it"),
    "train_only_bn": ("int", "training: only batch norm is trained up to this layer"),
    "learning_rate": ("float", "training: this layer's learning-rate scale"),
    "dontload": ("int", ("starting a training run: load_weights_upto skips this layer; this package reads every "
                         "conv's arrays as save_weights writes them (a file without them is refused as truncated)")),
    "dontloadscales": ("int", ("starting a training run: load_convolutional_weights skips the batch-norm arrays; "
                               "this package reads them, as save_weights writes them")),
})

_STREAMS = {"stream": ("int", "CUDA stream scheduling"), "wait_stream": ("int", "CUDA stream scheduling")}

CONV_KEYS: dict[str, DarknetKey] = {
    **_keys(_CONV, HONOURED, {
        "filters": ("int", "output channels (default 1)"),
        "size": ("int", "kernel size (default 1)"),
        "stride": ("int", "stride (default 1)"),
        "stride_x": ("int", "horizontal stride (default: stride); must equal stride_y here"),
        "stride_y": ("int", "vertical stride (default: stride); must equal stride_x here"),
        "pad": ("int", "1: padding = size/2"),
        "padding": ("int", "padding pixels each side when pad=0 (default 0)"),
        "groups": ("int", "grouped convolution (default 1)"),
        "activation": ("str", "activations.c get_activation (default logistic)"),
        "batch_normalize": ("int", "batch norm; its arrays are in the weights file"),
        "cbn": ("int", "cross-iteration batch norm: batch_normalize=2, the same at inference and in the file"),
    }),
    **_unsupported(_CONV, {
        "dilation": ("int", "1", "dilated kernel (ignored by Darknet for size=1)"),
        "antialiasing": ("int", "0", "adds a blur layer after the conv"),
        "share_index": ("int", None, "shares another layer's weights, absent from the weights file"),
        "binary": ("int", "0", "binarized weights"),
        "xnor": ("int", "0", "XNOR-net binary inputs and weights"),
        "bin_output": ("int", "0", "binary output of an XNOR layer"),
        "flipped": ("int", "0", "transposes the weights when loading"),
        "coordconv": ("int", "0", "adds coordinate channels to the output"),
    }),
    **_keys(_CONV, IGNORED, {
        "assisted_excitation": ("float", "training only (convolutional_layer.c: applied when state.train)"),
        "sway": ("int", "training: weight deformation in the update step"),
        "rotate": ("int", "training: weight deformation in the update step"),
        "stretch": ("int", "training: weight deformation in the update step"),
        "stretch_sway": ("int", "training: weight deformation in the update step"),
        "angle": ("float", "training: angle of sway / stretch_sway"),
        "dot": ("float", "training (its use in the forward pass is commented out)"),
        "grad_centr": ("int", "training: gradient centralization"),
        "reverse": ("float", "training"),
        **_STREAMS,
    }),
}

ROUTE_KEYS: dict[str, DarknetKey] = {
    **_keys("parser.c parse_route", HONOURED, {
        "layers": ("ints", "source layers, absolute or relative (negative)"),
        "groups": ("int", "channel groups of each source (default 1)"),
        "group_id": ("int", "which group is kept (default 0)"),
    }),
    **_keys("parser.c parse_route", IGNORED, _STREAMS),
}

MAXPOOL_KEYS: dict[str, DarknetKey] = {
    **_keys(_MAXPOOL, HONOURED, {
        "stride": ("int", "stride (default 1)"),
        "stride_x": ("int", "horizontal stride (default: stride); must equal stride_y here"),
        "stride_y": ("int", "vertical stride (default: stride); must equal stride_x here"),
        "size": ("int", "window size (default: stride)"),
        "padding": ("int", "padding pixels in all, padding/2 before (default: size-1)"),
    }),
    **_unsupported(_MAXPOOL, {
        "maxpool_depth": ("int", "0", "max over channels instead of space"),
        "antialiasing": ("int", "0", "adds a blur layer after the pool"),
        "maxpool_zero_nonmax": ("int", "0", "zeroes the input values that are not the maximum"),
    }),
    "out_channels": DarknetKey("int", IGNORED, _MAXPOOL, "output channels of maxpool_depth only"),
}

UPSAMPLE_KEYS: dict[str, DarknetKey] = {
    "stride": DarknetKey("int", HONOURED, "parser.c parse_upsample", "nearest-neighbour factor (default 2); "
                         "a negative stride downsamples, which this package does not support"),
    "scale": DarknetKey("float", UNSUPPORTED, "parser.c parse_upsample", "multiplies the output values", "1"),
}

YOLO_KEYS: dict[str, DarknetKey] = {
    **_keys(_YOLO, HONOURED, {
        "classes": ("int", "classes"),
        "num": ("int", "number of anchors listed"),
        "mask": ("ints", "the anchors this head uses"),
        "anchors": ("floats", "anchor w,h pairs, network pixels"),
        "scale_x_y": ("float", "x' = sigmoid(tx) * s - (s - 1) / 2"),
        "nms_kind": ("str", ("NMS after detection (the last [yolo]'s): default (box.c do_nms_sort: IoU), "
                             "greedynms (box.c diounms_sort with box_diou: DIoU, exponent 0.6), diounms (box_diounms: "
                             "DIoU, exponent beta_nms); parse_yolo reads any other value, cornersnms included, as "
                             "default")),
        "beta_nms": ("float", "exponent of DIoU's distance term for nms_kind=diounms (default 0.6)"),
    }),
    **_unsupported(_YOLO, {
        "new_coords": ("int", "0", "the scaled-YOLOv4 / YOLOv7 box decode (yolo_layer.c get_yolo_box)"),
        "embedding_layer": ("int", None, "tracking embeddings for each detection"),
    }),
    **_keys(_YOLO, IGNORED, {
        "max": ("int", "training: most truth boxes per image"),
        "show_details": ("int", "training log"),
        "max_delta": ("float", _TRAIN), "counters_per_class": ("ints", _TRAIN),
        "label_smooth_eps": ("float", _TRAIN), "objectness_smooth": ("int", _TRAIN),
        "iou_normalizer": ("float", _TRAIN), "obj_normalizer": ("float", _TRAIN), "cls_normalizer": ("float", _TRAIN),
        "delta_normalizer": ("float", _TRAIN), "iou_loss": ("str", _TRAIN), "iou_thresh_kind": ("str", _TRAIN),
        "jitter": ("float", _TRAIN), "resize": ("float", _TRAIN), "focal_loss": ("int", _TRAIN),
        "ignore_thresh": ("float", _TRAIN), "truth_thresh": ("float", _TRAIN), "iou_thresh": ("float", _TRAIN),
        "random": ("float", _TRAIN), "map": ("str", "training: a file mapping truth class ids"),
        **{k: (t, "tracking with embedding_layer only") for k, t in (
            ("track_history_size", "int"), ("sim_thresh", "float"), ("dets_for_track", "int"),
            ("dets_for_show", "int"), ("track_ciou_norm", "float"))},
    }),
}

#: Keys per section this package builds; the keys of every layer section include :data:`ANY_LAYER_KEYS`.
SECTION_KEYS: dict[str, dict[str, DarknetKey]] = {
    "net": NET_KEYS,
    "network": NET_KEYS,
    "convolutional": {**CONV_KEYS, **ANY_LAYER_KEYS},
    "route": {**ROUTE_KEYS, **ANY_LAYER_KEYS},
    "maxpool": {**MAXPOOL_KEYS, **ANY_LAYER_KEYS},
    "upsample": {**UPSAMPLE_KEYS, **ANY_LAYER_KEYS},
    "yolo": {**YOLO_KEYS, **ANY_LAYER_KEYS},
}

#: Section types Darknet builds (parser.c string_to_layer_type) that this package does not, with what they do.
UNSUPPORTED_LAYERS: dict[str, str] = {
    "shortcut": "residual sum, as in YOLOv4 and YOLOv3",
    "scale_channels": "channel attention (squeeze-and-excitation)",
    "sam": "spatial attention",
    "region": "the YOLOv2 head",
    "Gaussian_yolo": "the Gaussian YOLOv3 head",
    "detection": "the YOLOv1 head",
    "implicit": "YOLOR implicit knowledge",
    "local": "locally connected layer",
    "activation": "stand-alone activation",
    "crnn": "recurrent layer", "rnn": "recurrent layer", "gru": "recurrent layer", "lstm": "recurrent layer",
    "conv_lstm": "recurrent layer", "history": "recurrent layer",
    "conn": "fully connected layer", "connected": "fully connected layer",
    "local_avg": "local average pooling", "local_avgpool": "local average pooling",
    "avg": "global average pooling", "avgpool": "global average pooling",
    "reorg3d": "space-to-depth", "reorg": "space-to-depth",
    "dropout": "dropout", "lrn": "local response normalization", "normalization": "local response normalization",
    "batchnorm": "stand-alone batch norm", "soft": "softmax", "softmax": "softmax",
    "contrastive": "contrastive loss", "crop": "crop", "cost": "cost layer",
    "empty": "empty layer", "silence": "empty layer",
}

#: Every activation Darknet knows (activations.c get_activation); this package builds the first five.
DARKNET_ACTIVATIONS = (
    "leaky", "linear", "relu", "mish", "logistic",
    "swish", "hard_mish", "normalize_channels", "normalize_channels_softmax", "normalize_channels_softmax_maxval",
    "loggy", "relu6", "elu", "selu", "gelu", "relie", "plse", "hardtan", "lhtan", "ramp", "revleaky", "tanh", "stair",
)
ACTIVATIONS = DARKNET_ACTIVATIONS[:5]

#: nms_kind values parse_yolo tells apart. It reads any other value as default; of those this package accepts
#: only cornersnms (which Darknet's [Gaussian_yolo] tells apart), so that a misspelt kind is refused.
NMS_KINDS = ("default", "greedynms", "diounms")
NMS_ALIASES = {"cornersnms": "default"}
