"""How the reference opens an image (`compat="bagel"`), reproduced per image.

The reference calls `Image.open` with every decoder Pillow has and, at import, sets
Pillow's process-wide `ImageFile.LOAD_TRUNCATED_IMAGES = True`, so a truncated JPEG or PNG
decodes (its missing part filled as Pillow fills it). Here neither is global:

* `reference_formats()`: the formats `Image.open` tries, in its order, less the ones that
  start another program (EPS runs Ghostscript): those stay off even in compat mode
  (docs/compat.md lists it as the one exception).
* `tolerant_factory(name)`: a decoder whose images open and decode as if the flag were
  set. Pillow reads the flag from module globals (`ImageFile.LOAD_TRUNCATED_IMAGES`, or
  the `ImageFile` module a plugin imported). The decoder's class is subclassed with copies
  of the methods that read the flag, each given a view of its module's globals in which
  the flag is on (and the module's classes are such subclasses too, so PNG's chunk reader
  tolerates bad checksums while opening). Pillow's own setting is never written, so other
  threads and other images keep whatever the program set.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

from PIL import Image, ImageFile

# Decoders that hand the bytes to an external program: never used, in either mode.
EXTERNAL_PROGRAM_FORMATS = frozenset({"EPS"})
_FLAG = "LOAD_TRUNCATED_IMAGES"
_VIEWS: dict[str, dict[str, Any]] = {}
_FLAG_MODULES: dict[str, bool] = {}
_FACTORIES: dict[str, tuple[Any, Any]] = {}  # format -> (Pillow's factory, its tolerant one)
# What `Image.preinit` registers, in its order: `Image.open` tries these before the others.
_PREINIT_FORMATS = ("BMP", "DIB", "GIF", "JPEG", "PPM", "PNG")
_LOCK = threading.RLock()  # re-entrant: a view's subclasses copy methods, which ask for views


def reference_formats() -> tuple[str, ...]:
    """Every format Pillow's `Image.open` would try, in its order, less the external-program
    ones: the common plugins `Image.preinit` registers first, then the others `Image.init`
    registers (whichever of the two this process ran first)."""
    Image.init()  # registers every plugin, as Image.open does when the common ones fail
    names = [name for name in Image.ID if name not in EXTERNAL_PROGRAM_FORMATS]
    return tuple([n for n in _PREINIT_FORMATS if n in names] + [n for n in names if n not in _PREINIT_FORMATS])


def tolerant_factory(name: str) -> tuple[Any, Any]:
    """`Image.OPEN[name]` (factory, accept), the factory replaced by one whose images open
    and decode as if Pillow's flag were set: a tolerant subclass, or a copy of a factory
    function that builds one. Made once per format."""
    factory, accept = Image.OPEN[name]
    with _LOCK:
        made = _FACTORIES.get(name)
        if made is None or made[0] is not factory:
            if isinstance(factory, type):
                tolerant = _tolerant_globals(factory.__module__).get(factory.__name__, factory)
            elif isinstance(factory, types.FunctionType):
                tolerant = _tolerant_copy(factory)
            else:
                tolerant = factory
            made = _FACTORIES[name] = (factory, tolerant)
    return made[1], accept


def _imagefile_view() -> types.ModuleType:
    """A stand-in for the `ImageFile` module that plugins read the flag through: every
    name of the real one, with the flag on."""
    view = types.ModuleType(ImageFile.__name__, ImageFile.__doc__)
    view.__dict__.update(vars(ImageFile))
    setattr(view, _FLAG, True)
    return view


def _tolerant_globals(module_name: str) -> dict[str, Any]:
    """The globals of `module_name` as the reference's process sees them: the flag on, and
    (in a module whose code reads the flag) its classes replaced by tolerant subclasses, so
    that what a plugin makes while opening, such as PNG's chunk reader, tolerates too."""
    with _LOCK:
        view = _VIEWS.get(module_name)
        if view is not None:
            return view
        module = sys.modules[module_name]
        view = _VIEWS[module_name] = dict(vars(module))
        if module is ImageFile:
            view[_FLAG] = True
        if isinstance(view.get("ImageFile"), types.ModuleType):
            view["ImageFile"] = _imagefile_view()
        if _reads_flag_anywhere(module_name):
            for name, member in list(view.items()):
                if isinstance(member, type) and member.__module__ == module_name:
                    view[name] = _tolerant_class(member)
        return view


def _reads_flag(member: object) -> bool:
    return isinstance(member, types.FunctionType) and _FLAG in member.__code__.co_names


def _reads_flag_anywhere(module_name: str) -> bool:
    """Whether code of `module_name` (its functions and its classes' methods) reads the flag."""
    with _LOCK:
        known = _FLAG_MODULES.get(module_name)
        if known is None:
            members = list(vars(sys.modules[module_name]).values())
            for cls in [m for m in members if isinstance(m, type) and m.__module__ == module_name]:
                members.extend(vars(cls).values())
            known = _FLAG_MODULES[module_name] = any(_reads_flag(member) for member in members)
        return known


def _tolerant_copy(function: types.FunctionType) -> types.FunctionType:
    copy = types.FunctionType(
        function.__code__,
        _tolerant_globals(function.__module__),
        function.__name__,
        function.__defaults__,
        function.__closure__,  # keeps `__class__` for zero-argument super()
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


def _tolerant_class(cls: type) -> type:
    """A subclass of `cls` whose methods from modules that read the flag (the first
    definition along the MRO) are copies that see it on and see those modules' classes as
    such subclasses (PNG's `_open` then makes a tolerant chunk reader)."""
    methods: dict[str, Any] = {}
    seen: set[str] = set()
    for base in cls.__mro__:
        for name, member in vars(base).items():
            if name in seen:
                continue
            seen.add(name)
            module = getattr(member, "__module__", None)
            if isinstance(member, types.FunctionType) and module in sys.modules and _reads_flag_anywhere(module):
                methods[name] = _tolerant_copy(member)
    return type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__}) if methods else cls
