"""How a config's (or a command's) `loaders` and `models` entries resolve to the names cells carry and their plugins."""

from __future__ import annotations

import difflib

from .cells import ConfigError, config_models
from .pluginsource import find_module
from .registry import (
    DEFAULT_MODEL,
    LOADERS,
    MODEL_NAME,
    NO_MODEL,
    PLUGIN_NAME,
    REFERENCE,
    TORCHVISION_MODELS,
    installed_models,
    installed_plugins,
    reference_name,
    torchvision_input_size,
)


def resolve_plugins(cfg: dict, find: bool = False) -> None:
    """cfg["loaders"] and cfg["models"] as the names cells carry, their plugins under cfg["plugins"] and
    cfg["model_plugins"]; find: refuse a plugin whose module cannot be found here (`_require_module`)."""
    _resolve_loaders(cfg, find=find)
    _resolve_models(cfg, find=find)


def resolve_loaders(cfg: dict, entries: list[str], key: str) -> list[str]:
    """The names cells carry for `entries` (as in `loaders`; errors name `key`, a command's option), the plugins
    among them added to cfg["plugins"]."""
    probe = {"loaders": list(entries), "plugins": dict(cfg.get("plugins") or {})}
    _resolve_loaders(probe, key)
    cfg["plugins"] = probe["plugins"]
    return probe["loaders"]


def measured_models(cfg: dict, model: str | None, key: str = "--model") -> list[str]:
    """The models a measurement outside the grid (tune, sweep, ceiling, crosscheck) trains: the config's (`models`,
    over its parts), or `model` alone when given - a model of the config, or any model a config may name (a
    torchvision classification builder, `none`, a plugin: `_resolve_models`), its plugin added to
    cfg["model_plugins"]. Errors name `key` (a command's option) and the value."""
    if model is None:
        return config_models(cfg)
    if model in config_models(cfg):
        return [model]
    probe = {"models": [model], "model_plugins": dict(cfg.get("model_plugins") or {})}
    _resolve_models(probe, key)
    name = probe["models"][0]
    size = torchvision_input_size(name) if name not in probe["model_plugins"] else None
    if size is not None and cfg["crop_size"] != size:
        raise ConfigError(
            f"{key} {model!r}: {name} takes {size} x {size} images only, but config key 'crop_size' is "
            f"{cfg['crop_size']}; set crop_size to {size} to measure it"
        )
    cfg["model_plugins"] = probe["model_plugins"]
    return [name]


def _resolve_loaders(cfg: dict, key: str = "config key 'loaders'", find: bool = False) -> None:
    """cfg["loaders"] as the names cells carry, and cfg["plugins"] (name -> `module:factory`) for the plugin loaders:
    a `loaders` entry is a built-in name, a name under `plugins`, a `module:factory` reference (named by
    `reference_name`) or an installed package's plugin (entry-point group `loaderbench.loaders`).

    find: refuse a plugin whose module cannot be found here, without importing it (pluginsource.find_module), naming
    where the config names it; otherwise its cells would each fail on the import."""
    declared = dict(cfg.get("plugins") or {})
    for name, ref in declared.items():
        if not PLUGIN_NAME.match(name) or name in LOADERS:
            raise ConfigError(
                f"config key 'plugins.{name}': a plugin's name is lowercase letters, digits and '-', "
                f"and not a built-in loader's ({', '.join(LOADERS)})"
            )
        if not REFERENCE.match(ref):
            raise ConfigError(f"config key 'plugins.{name}': {ref!r} is not a 'module:factory' reference")
    names, plugins, installed = [], {}, None
    for entry in cfg["loaders"]:
        if entry in LOADERS:
            names.append(entry)
            continue
        if entry in declared:
            name, ref, where = entry, declared[entry], f"config key 'plugins.{entry}'"
        elif REFERENCE.match(entry):
            name, ref, where = reference_name(entry), entry, f"{key}: plugin {entry!r}"
        else:
            installed = installed_plugins() if installed is None else installed
            if entry not in installed:
                known = ", ".join([*LOADERS, *declared, *installed])
                raise ConfigError(
                    f"{key}: unknown loader {entry!r}; known: {known}; or name a plugin's "
                    "factory as 'module:factory' (docs/plugins.md)"
                )
            name, ref = entry, installed[entry]
            where = f"{key}: plugin {entry!r} (an installed package's entry point, {ref!r})"
        if find:
            _require_module(ref, where)
        if name in LOADERS or not PLUGIN_NAME.match(name):
            raise ConfigError(
                f"{key}: plugin {entry!r} would be named {name!r}, which is a built-in "
                "loader's or not a name; name it under 'plugins'"
            )
        if plugins.setdefault(name, ref) != ref:
            raise ConfigError(
                f"{key}: {plugins[name]!r} and {ref!r} would both be named {name!r}; name them under 'plugins'"
            )
        names.append(name)
    if len(set(names)) < len(names):
        raise ConfigError(f"{key}: a loader is named twice ({', '.join(names)})")
    cfg["loaders"], cfg["plugins"] = names, {**declared, **plugins}


def _require_module(ref: str, where: str) -> None:
    """Refuse plugin `ref` ('module:factory', named in the config at `where`) whose module cannot be found here,
    without importing it (pluginsource.find_module): otherwise each of its cells would fail on the import."""
    if find_module(module := ref.partition(":")[0]) is None:
        raise ConfigError(
            f"{where}: module {module!r} cannot be found here (not installed, not on PYTHONPATH, "
            "or a package above it fails to import); install its package, or put the folder that "
            "holds it on PYTHONPATH before starting snakemake (docs/plugins.md)"
        )


def _resolve_models(cfg: dict, key: str = "config key 'models'", find: bool = False) -> None:
    """cfg["models"] as the names cells carry, and cfg["model_plugins"] (name -> `module:factory`) for the plugin
    models: a `models` entry is a torchvision classification builder's name, `none` (the loader alone), a name under
    `model_plugins`, a `module:factory` reference (named by `reference_name`) or an installed package's model
    (entry-point group `loaderbench.models`). torchvision is imported only for a name none of these know (a builder
    newer than TORCHVISION_MODELS). find: as in `_resolve_loaders`."""
    declared = dict(cfg.get("model_plugins") or {})
    for name, ref in declared.items():
        if not MODEL_NAME.match(name) or name == NO_MODEL or name in TORCHVISION_MODELS:
            raise ConfigError(
                f"config key 'model_plugins.{name}': a model's name is lowercase letters, digits, '_' and '-', and "
                "not `none` or a torchvision model's"
            )
        if not REFERENCE.match(ref):
            raise ConfigError(f"config key 'model_plugins.{name}': {ref!r} is not a 'module:factory' reference")
    names, plugins, installed = [], {}, None
    for entry in cfg.get("models") or [DEFAULT_MODEL]:
        if entry == NO_MODEL or entry in TORCHVISION_MODELS:
            names.append(entry)
            continue
        if entry in declared:
            name, ref, where = entry, declared[entry], f"config key 'model_plugins.{entry}'"
        elif REFERENCE.match(entry):
            name, ref, where = reference_name(entry), entry, f"{key}: plugin {entry!r}"
        else:
            installed = installed_models() if installed is None else installed
            if entry in installed:
                name, ref = entry, installed[entry]
                where = f"{key}: model {entry!r} (an installed package's entry point, {ref!r})"
            elif MODEL_NAME.match(entry) and entry in _newer_torchvision_models():
                names.append(entry)
                continue
            else:
                known = [NO_MODEL, *TORCHVISION_MODELS, *declared, *installed]
                close = difflib.get_close_matches(entry, known, n=4, cutoff=0.5)
                raise ConfigError(
                    f"{key}: unknown model {entry!r}"
                    + (f"; closest: {', '.join(close)}" if close else "")
                    + "; name a classification model of torchvision.models (e.g. resnet50), `none`, a model under "
                    "'model_plugins', or a plugin's factory as 'module:factory' (docs/plugins.md)"
                )
        if find:
            _require_module(ref, where)
        if name == NO_MODEL or name in TORCHVISION_MODELS or not MODEL_NAME.match(name):
            raise ConfigError(
                f"{key}: plugin {entry!r} would be named {name!r}, which is `none`, a torchvision model's or not "
                "a name; name it under 'model_plugins'"
            )
        if plugins.setdefault(name, ref) != ref:
            raise ConfigError(
                f"{key}: {plugins[name]!r} and {ref!r} would both be named {name!r}; name them under 'model_plugins'"
            )
        names.append(name)
    if len(set(names)) < len(names):
        raise ConfigError(f"{key}: a model is named twice ({', '.join(names)})")
    cfg["models"], cfg["model_plugins"] = names, {**declared, **plugins}


def _newer_torchvision_models() -> list[str]:
    """The classification builders of the installed torchvision (imported only here: a name TORCHVISION_MODELS lacks
    may be one a newer torchvision added); none when torchvision is not installed."""
    try:
        import torchvision
    except ImportError:
        return []
    return torchvision.models.list_models(module=torchvision.models)
