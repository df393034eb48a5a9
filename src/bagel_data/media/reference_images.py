"""How the reference opens an image (`compat="bagel"`), reproduced per image.

The reference calls `Image.open` with every decoder Pillow has and, at import, sets
Pillow's process-wide `ImageFile.LOAD_TRUNCATED_IMAGES = True`, so a truncated JPEG or PNG
decodes (its missing part filled as Pillow fills it). Here neither is global:

* `reference_formats()`: the formats `Image.open` tries, in its order, less the ones that
  start another program (EPS runs Ghostscript): those stay off even in compat mode
  (docs/compat.md lists it as the one exception).
* `tolerate_truncation(image)`: this one image decodes as if the flag were set. Pillow
  reads the flag at decode time from module globals (`ImageFile.LOAD_TRUNCATED_IMAGES`,
  or the `ImageFile` module a plugin imported). Each method of the image (and of its PNG
  chunk reader) that reads the flag is copied onto the instance with a view of its
  module's globals in which the flag is on; Pillow's own setting is never written, so
  other threads and other images keep whatever the program set.
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
_LOCK = threading.Lock()


def reference_formats() -> tuple[str, ...]:
    """Every format Pillow's `Image.open` would try, in its order, less the external-program ones."""
    Image.init()  # registers every plugin, as Image.open does when the common ones fail
    return tuple(name for name in Image.ID if name not in EXTERNAL_PROGRAM_FORMATS)


def _imagefile_view() -> types.ModuleType:
    """A stand-in for the `ImageFile` module that plugins read the flag through: every
    name of the real one, with the flag on."""
    view = types.ModuleType(ImageFile.__name__, ImageFile.__doc__)
    view.__dict__.update(vars(ImageFile))
    setattr(view, _FLAG, True)
    return view


def _tolerant_globals(module_name: str) -> dict[str, Any]:
    """The globals of `module_name` as the reference's process sees them (the flag on)."""
    with _LOCK:
        view = _VIEWS.get(module_name)
        if view is None:
            view = dict(vars(sys.modules[module_name]))
            if module_name == ImageFile.__name__:
                view[_FLAG] = True
            if isinstance(view.get("ImageFile"), types.ModuleType):
                view["ImageFile"] = _imagefile_view()
            _VIEWS[module_name] = view
        return view


def _reads_flag(function: types.FunctionType) -> bool:
    return _FLAG in function.__code__.co_names


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


def _carry_flag(obj: object) -> None:
    """Bind, on `obj` itself, a flag-on copy of each method its class resolves to that reads
    the flag (the first definition along the MRO: an override that does not read it stays)."""
    seen: set[str] = set()
    for cls in type(obj).__mro__:
        for name, member in vars(cls).items():
            if name in seen:
                continue
            seen.add(name)
            if name in vars(obj) or not isinstance(member, types.FunctionType) or not _reads_flag(member):
                continue
            if member.__module__ in sys.modules:
                setattr(obj, name, types.MethodType(_tolerant_copy(member), obj))


def tolerate_truncation(image: Image.Image) -> Image.Image:
    """`image` (opened, not yet loaded), made to decode a truncated file as the reference
    does; returns it. Pillow's process-wide flag is left as it is."""
    _carry_flag(image)
    for helper in ("png", "ico"):  # PNG's chunk reader and ICO's frame reader read the flag too
        inner = getattr(image, helper, None)
        if inner is not None and type(inner).__module__.startswith("PIL."):
            _carry_flag(inner)
    return image
