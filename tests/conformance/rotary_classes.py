"""The rotary embedding classes of the installed transformers, and default
configs to build each with (a module shared by the conformance tests, not
collected by pytest)."""

import importlib
import inspect
import os


def rotary_classes(transformers):
    """(module name, class) of every *RotaryEmbedding class defined in a
    modeling file of transformers.models."""
    root = os.path.join(os.path.dirname(transformers.__file__), "models")
    out = []
    for package in sorted(os.listdir(root)):
        folder = os.path.join(root, package)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if not (name.startswith("modeling_") and name.endswith(".py")):
                continue
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                if "RotaryEmbedding(" not in f.read():
                    continue
            modname = f"transformers.models.{package}.{name[:-3]}"
            try:
                module = importlib.import_module(modname)
            except Exception:  # an optional dependency missing: not a config question
                continue
            for cname, cls in sorted(vars(module).items()):
                if cname.endswith("RotaryEmbedding") and inspect.isclass(cls):
                    if cls.__module__ == modname:
                        out.append((module, cls))
    return out


def default_configs(transformers, module, cls):
    """Default configs that `cls` may be built with: its annotated config
    class and the modeling file's, each with its text sub-config first."""
    base = transformers.PretrainedConfig
    annotated = inspect.signature(cls.__init__).parameters.get("config")
    classes = []
    if annotated is not None and inspect.isclass(annotated.annotation):
        classes.append(annotated.annotation)
    classes += [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, base)]
    for config_class in dict.fromkeys(classes):
        if config_class is base or not issubclass(config_class, base):
            continue
        try:
            config = config_class()
        except Exception:
            continue
        text = getattr(config, "text_config", None)
        yield from ([text] if isinstance(text, base) else []) + [config]
