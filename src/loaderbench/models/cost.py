"""What a model's step costs relative to MobileNetV2's, from torchvision's published compute per image: the planner's
prior for a model no record has measured yet (`loaderbench.plan.costmodel`)."""

from __future__ import annotations

from loaderbench.core.registry import DEFAULT_MODEL, NO_MODEL

# GFLOPS of a forward pass of one 224 x 224 image, per torchvision builder: each weights enum's `meta["_ops"]` (at
# its weights' crop size), scaled to 224 x 224 by the pixels (a convolution's cost grows with them), of the weights
# nearest 224 px. Generated once from the installed torchvision (0.29) with
#   import torchvision.models as m
#   for n in m.list_models(module=m):
#       ws = sorted(m.get_model_weights(n), key=lambda w: abs(w.transforms.keywords["crop_size"] - 224))
#       print(n, ws[0].meta["_ops"] * (224 / ws[0].transforms.keywords["crop_size"]) ** 2)
# fmt: off
GFLOPS_224 = {
    "alexnet": 0.714, "convnext_base": 15.355, "convnext_large": 34.361, "convnext_small": 8.684,
    "convnext_tiny": 4.456, "densenet121": 2.834, "densenet161": 7.728, "densenet169": 3.36, "densenet201": 4.291,
    "efficientnet_b0": 0.386, "efficientnet_b1": 0.598, "efficientnet_b2": 0.658, "efficientnet_b3": 1.019,
    "efficientnet_b4": 1.527, "efficientnet_b5": 2.477, "efficientnet_b6": 3.432, "efficientnet_b7": 5.261,
    "efficientnet_v2_l": 12.213, "efficientnet_v2_m": 5.353, "efficientnet_v2_s": 2.847, "googlenet": 1.498,
    "inception_v3": 3.206, "maxvit_t": 5.558, "mnasnet0_5": 0.104, "mnasnet0_75": 0.215, "mnasnet1_0": 0.314,
    "mnasnet1_3": 0.526, "mobilenet_v2": 0.301, "mobilenet_v3_large": 0.217, "mobilenet_v3_small": 0.057,
    "regnet_x_16gf": 15.941, "regnet_x_1_6gf": 1.603, "regnet_x_32gf": 31.736, "regnet_x_3_2gf": 3.177,
    "regnet_x_400mf": 0.414, "regnet_x_800mf": 0.8, "regnet_x_8gf": 7.995, "regnet_y_128gf": 127.518,
    "regnet_y_16gf": 15.912, "regnet_y_1_6gf": 1.612, "regnet_y_32gf": 32.28, "regnet_y_3_2gf": 3.176,
    "regnet_y_400mf": 0.402, "regnet_y_800mf": 0.834, "regnet_y_8gf": 8.473, "resnet101": 7.801, "resnet152": 11.514,
    "resnet18": 1.814, "resnet34": 3.664, "resnet50": 4.089, "resnext101_32x8d": 16.414, "resnext101_64x4d": 15.46,
    "resnext50_32x4d": 4.23, "shufflenet_v2_x0_5": 0.04, "shufflenet_v2_x1_0": 0.145, "shufflenet_v2_x1_5": 0.296,
    "shufflenet_v2_x2_0": 0.583, "squeezenet1_0": 0.819, "squeezenet1_1": 0.349, "swin_b": 15.431, "swin_s": 8.741,
    "swin_t": 4.491, "swin_v2_b": 15.561, "swin_v2_s": 8.84, "swin_v2_t": 4.548, "vgg11": 7.609, "vgg11_bn": 7.609,
    "vgg13": 11.308, "vgg13_bn": 11.308, "vgg16": 15.47, "vgg16_bn": 15.47, "vgg19": 19.632, "vgg19_bn": 19.632,
    "vit_b_16": 17.564, "vit_b_32": 4.409, "vit_h_14": 167.295, "vit_l_16": 61.555, "vit_l_32": 15.378,
    "wide_resnet101_2": 22.753, "wide_resnet50_2": 11.398,
}
# fmt: on


# How a step's time grows with its compute, by host kind. On a CPU it grows with the compute. On a GPU a light model's
# step is held up by memory traffic and kernel launches more than by arithmetic, so it grows far more slowly: on one
# H200 at batch 256 AMP (docs/results/2026-12-04-h200/models) the step's time against MobileNetV2's went as GFLOPS to
# the power 0.16 (resnet50) to 1.8 (efficientnet_b0), 0.34 for vit_b_16 and 0.42 for convnext_tiny; the median is
# taken. A prior for the planner only, until records of the model exist on the host.
COMPUTE_EXPONENT = {"cpu": 1.0, "gpu": 0.4}


def relative_cost(model: str, kind: str = "cpu") -> float | None:
    """A step of `model` against one of MobileNetV2 at the same batch and crop on a host of `kind` ("cpu" or
    "gpu"), from their forward compute per image; 0 for `none` (no model); None where unknown (a plugin model, a
    builder newer than the table)."""
    if model == NO_MODEL:
        return 0.0
    gflops = GFLOPS_224.get(model)
    return None if gflops is None else (gflops / GFLOPS_224[DEFAULT_MODEL]) ** COMPUTE_EXPONENT[kind]
