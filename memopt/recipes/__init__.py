"""Model recipes: how a user hands memopt a model.

A recipe is a Python module (a ``.py`` file path, or ``package.module``) or an object
inside one (``package.module:attr``) that provides:

``build_model(**options) -> torch.nn.Module``
    The model to train.
``make_batch(batch_size, **options) -> (inputs, target)``
    One training step's data. ``inputs`` is a tensor, a tuple of tensors (passed
    positionally) or a dict of tensors (passed by keyword); ``target`` is a tensor or None.
``loss(output, target) -> scalar tensor`` (optional)
    Default: cross-entropy when ``target`` holds integers, mean squared error when it
    holds floats, ``output.float().mean()`` when it is None.
``optimizer(parameters) -> torch.optim.Optimizer`` (optional)
    Default: ``torch.optim.AdamW(parameters, lr=1e-4)``. Its state is part of the peak.

Options (``--seq``, ``--size``, ``-o key=value``) reach each function that declares a
parameter of that name; an option no function declares is an error.

``-o loss_only=true`` (any recipe, ``hf:`` ones included) trains the model the way users
who bundle model and loss do: its ``forward`` returns the scalar loss alone (the recipe's
``loss``, or the default one, computed inside it), so ORT exports the loss into its graph
where it fuses and plans differ; a model whose output carries a loss returns that loss.

``hf:NAME`` and ``hf:PATH`` name a Hugging Face model by its config (``memopt.recipes.hf``,
``load_hf_recipe``): a recipe whose model computes its own loss. Which loader a spec takes is
``memopt.core``'s to say (``RecipeTarget.load``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from memopt.errors import MemoptError
from memopt.recipes.transformer import check_shape_options

__all__ = [
    "BUILTIN_RECIPES",
    "DEFAULT_RECIPE",
    "LOSS_ONLY_OPTION",
    "Recipe",
    "RecipeError",
    "check_hf_recipe",
    "check_recipe",
    "load_hf_recipe",
    "load_recipe",
    "parse_option_value",
    "recipe_source",
]

BUILTIN_RECIPES: dict[str, str] = {
    "gpt": "memopt.recipes.gpt",
    "bert": "memopt.recipes.bert",
    "mlp": "memopt.recipes.mlp",
    "cnn": "memopt.recipes.cnn",
}
DEFAULT_RECIPE = "gpt"
_TRANSFORMERS = ("gpt", "bert")  # built-ins whose shape options memopt checks before a run
REQUIRED = ("build_model", "make_batch")
# The option every recipe takes: forward returns the scalar loss (the loss runs inside ORT's graph).
LOSS_ONLY_OPTION = "loss_only"


class RecipeError(MemoptError):
    """The recipe cannot be loaded or breaks the contract."""


@dataclass(frozen=True)
class Recipe:
    """A loaded recipe bound to its options."""

    spec: str
    build_model: Callable[..., Any]
    make_batch: Callable[..., Any]
    loss: Callable[[Any, Any], Any] | None = None
    optimizer: Callable[[Any], Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)  # kept in the run folder: name -> text
    notes: tuple[str, ...] = ()  # what memopt chose for the user, said once
    loss_only: bool = False  # forward returns the loss: the loss is computed inside the model

    def model(self) -> Any:
        return self.build_model(**_accepted(self.build_model, self.options))

    def batch(self, batch_size: int) -> Any:
        return self.make_batch(batch_size, **_accepted(self.make_batch, self.options))


def parse_option_value(text: str) -> bool | int | float | str:
    """``-o key=value`` values: booleans, integers and floats by their spelling, else text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_recipe(spec: str, options: Mapping[str, Any] | None = None) -> Recipe:
    """Import the recipe named by ``spec`` and check it against the contract."""
    options, loss_only = _loss_only(spec, options)
    source = _import_source(spec)
    missing = [name for name in REQUIRED if not callable(getattr(source, name, None))]
    if missing:
        raise RecipeError(
            f"recipe {spec!r} has no {' or '.join(f'{n}()' for n in missing)}; "
            "a recipe must provide build_model() and make_batch(batch_size)"
        )
    functions = {name: getattr(source, name, None) for name in (*REQUIRED, "loss", "optimizer")}
    for name in ("loss", "optimizer"):
        if functions[name] is not None and not callable(functions[name]):
            raise RecipeError(f"recipe {spec!r}: {name} is not callable")
    declared = _merged(_signature_kinds(cast(Callable[..., Any], functions[n])) for n in REQUIRED)
    _check_option_values(spec, options, declared)
    return Recipe(spec=spec, options=options, loss_only=loss_only, **functions)  # type: ignore[arg-type]  # required ones checked above


def load_hf_recipe(spec: str, options: Mapping[str, Any] | None = None) -> Recipe:
    """The recipe of a Hugging Face config (``hf:NAME`` or ``hf:PATH``): a model computing its own loss."""
    from memopt.recipes.hf import resolve_hf_target

    options, loss_only = _loss_only(spec, options)
    target = resolve_hf_target(spec, options)
    return Recipe(
        spec=spec,
        build_model=target.build_model,
        make_batch=target.make_batch,
        files={"config.json": target.config_json()},
        notes=target.notes,
        loss_only=loss_only,
    )


def check_hf_recipe(spec: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """A Hugging Face config resolved before any run (a bad field, size or attention fails
    here); returns the notes to say."""
    from memopt.recipes.hf import resolve_hf_target

    return resolve_hf_target(spec, _loss_only(spec, options)[0], models=False).notes


def recipe_source(spec: str) -> tuple[str, str]:
    """The file or module a recipe spec names, and the attribute after its ``:`` ("" for none).
    A file is named whole, ``:`` included; only a ``:`` after it (or after a module) names an attribute."""
    if spec.endswith(".py") or Path(spec).is_file():
        return spec, ""
    source, _, attr = spec.rpartition(":")
    return (source, attr) if source else (spec, "")


def check_recipe(spec: str, options: Mapping[str, Any] | None = None) -> None:
    """Refuse a recipe that names no built-in, no file and no module, or ``options`` it does
    not take, without importing it (recipe code runs only in the child). The child looks in
    the working directory last."""
    options, _ = _loss_only(spec, options)  # every recipe takes it: memopt wraps the model
    if spec in BUILTIN_RECIPES:
        origin = importlib.util.find_spec(BUILTIN_RECIPES[spec])
        _check_options(spec, Path(origin.origin) if origin and origin.origin else None, options)
        if spec in _TRANSFORMERS:
            try:
                check_shape_options(options or {})
            except ValueError as err:
                raise RecipeError(f"recipe {spec!r}: {err}") from None
        return
    module_name, attr = recipe_source(spec)
    if Path(module_name).is_file():
        _check_options(spec, None if attr else Path(module_name), options)
        return
    if module_name.endswith(".py") or "/" in module_name:
        if not Path(module_name).is_file():
            raise RecipeError(f"recipe {module_name!r} not found: no such file")
        return
    top = module_name.split(".")[0]
    if not top.isidentifier():
        raise RecipeError(
            f"recipe {spec!r} is not a built-in ({', '.join(BUILTIN_RECIPES)}), a .py file or a module name"
        )
    if importlib.machinery.PathFinder.find_spec(top, [*sys.path, os.getcwd()]) is None and top not in sys.modules:
        builtins = ", ".join(BUILTIN_RECIPES)
        raise RecipeError(f"recipe {spec!r} not found: not a built-in ({builtins}), a .py file or an importable module")


def _check_options(spec: str, source: Path | None, options: Mapping[str, Any] | None) -> None:
    """Refuse options that ``source``'s build_model() and make_batch() do not take, read from its
    text (nothing is run); a recipe whose functions cannot be read so, or take ``**``, is left
    to the child."""
    declared = _declared_options(source) if source is not None else None
    if declared is not None:
        _check_option_values(spec, options or {}, declared)


def _check_option_values(spec: str, options: Mapping[str, Any], declared: Mapping[str, type | None]) -> None:
    """Refuse an option no function declares, and a value of the wrong kind for one declared
    a ``bool``, an ``int`` or a ``float`` (by its annotation, else its default): ``-o tied=maybe``
    would reach ``build_model`` as the text "maybe", which Python takes for true."""
    unknown = sorted(set(options) - set(declared))
    if unknown:
        takes = ", ".join(sorted(set(declared) - {"batch_size"})) or "none"
        raise RecipeError(f"recipe {spec!r} takes no option {', '.join(unknown)} (its options: {takes})")
    for name, value in options.items():
        kind = declared[name]
        if kind is None or (isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)):
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        raise RecipeError(f"recipe {spec!r}: -o {name}={_spelled(value)} is not {_KIND_VALUES[kind]}")


# How each checked kind is written after ``-o name=`` (``parse_option_value`` reads them so).
_KIND_VALUES: dict[type, str] = {bool: "true or false", int: "a whole number", float: "a number"}


def _spelled(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _kind(annotation: str | None, default: Any) -> type | None:
    """``bool``, ``int`` or ``float`` when a parameter is declared one (``x: bool``,
    ``x: int | None``, ``Optional[float]``, or unannotated with such a default), else None."""
    if annotation is None:
        return type(default) if type(default) in _KIND_VALUES else None
    text = annotation.replace("typing.", "").strip()
    if text.startswith("Optional[") and text.endswith("]"):
        text = text.removeprefix("Optional[").removesuffix("]")
    parts = {part.strip() for part in text.split("|")} - {"None"}
    named = {kind.__name__: kind for kind in _KIND_VALUES}
    return named.get(parts.pop()) if len(parts) == 1 else None


def _merged(declarations: Iterable[Mapping[str, type | None]]) -> dict[str, type | None]:
    """The options of several functions; a name declared as different kinds is left unchecked."""
    merged: dict[str, type | None] = {}
    for declared in declarations:
        for name, kind in declared.items():
            merged[name] = kind if merged.get(name, kind) is kind else None
    return merged


def _signature_kinds(function: Callable[..., Any]) -> dict[str, type | None]:
    kinds = {}
    for name, parameter in inspect.signature(function).parameters.items():
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty:
            text = None
        else:  # postponed annotations are their text already
            text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        kinds[name] = _kind(text, None if parameter.default is inspect.Parameter.empty else parameter.default)
    return kinds


def _declared_options(source: Path) -> dict[str, type | None] | None:
    try:
        tree = ast.parse(source.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return None
    functions = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if not all(name in functions for name in REQUIRED):
        return None  # defined some other way (an import, an assignment): only the child can tell
    declarations = []
    for name in REQUIRED:
        arguments = functions[name].args
        if arguments.kwarg is not None:
            return None
        positional = (*arguments.posonlyargs, *arguments.args)
        defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
        pairs = [*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]
        declarations.append(
            {
                argument.arg: _kind(
                    None if argument.annotation is None else ast.unparse(argument.annotation), _literal(default)
                )
                for argument, default in pairs
            }
        )
    return _merged(declarations)


def _literal(node: ast.expr | None) -> Any:
    """A default written as a literal (``True``, ``0.15``), else None."""
    try:
        return None if node is None else ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _import_source(spec: str) -> ModuleType | Any:
    if spec in BUILTIN_RECIPES:
        return importlib.import_module(BUILTIN_RECIPES[spec])
    module_name, attr = recipe_source(spec)
    path = Path(module_name)
    try:
        if module_name.endswith(".py") or "/" in module_name or path.is_file():
            module = _import_file(path)
        else:
            module = importlib.import_module(module_name)
    except RecipeError:
        raise
    except ModuleNotFoundError as err:
        if err.name != module_name.split(".")[0]:
            raise RecipeError(f"recipe {spec!r} failed to import: {type(err).__name__}: {err}") from err
        builtins = ", ".join(BUILTIN_RECIPES)
        raise RecipeError(
            f"recipe {spec!r} not found: not a built-in ({builtins}), a .py file or an importable module"
        ) from err
    except Exception as err:  # the user's module may raise anything while importing
        raise RecipeError(f"recipe {spec!r} failed to import: {type(err).__name__}: {err}") from err
    if not attr:
        return module
    if not hasattr(module, attr):
        raise RecipeError(f"recipe {spec!r}: module {module_name!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        builtins = ", ".join(BUILTIN_RECIPES)
        raise RecipeError(f"recipe {str(path)!r} not found (built-in recipes: {builtins})")
    name = f"memopt_user_recipe_{path.stem}"
    # Its own folder comes first, as for ``python recipe.py``: the modules beside it import.
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RecipeError(f"recipe {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _loss_only(spec: str, options: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
    """The options without ``loss_only``, and its value (a boolean, or an error)."""
    rest = dict(options or {})
    value = rest.pop(LOSS_ONLY_OPTION, False)
    if not isinstance(value, bool):
        raise RecipeError(f"recipe {spec!r}: -o {LOSS_ONLY_OPTION}={value} is not true or false")
    return rest, value


def _parameters(function: Callable[..., Any]) -> set[str]:
    return set(inspect.signature(function).parameters)


def _accepted(function: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    names = _parameters(function)
    return {key: value for key, value in options.items() if key in names}
