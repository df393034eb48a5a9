"""Reading a YAML or JSON config file, with every failure a `ConfigError` naming the file.

A syntax error names the line and column; a folder, an unreadable file, non-UTF-8 bytes,
nesting too deep to parse, a key given twice in one mapping and aliases that expand past
`MAX_EXPANDED_VALUES` are errors too, never a raw parser exception or a silent last-one-wins.
"""

from __future__ import annotations

import json

import yaml

from ..errors import ConfigError
from ..sources import storage


def _read_text(path: str, what: str) -> str:
    try:
        data = storage.read_bytes(path)
    except IsADirectoryError:
        raise ConfigError(what, path, "this is a folder; give the path of a YAML/JSON file") from None
    except (OSError, ValueError, storage.StorageOptionsError) as exc:
        raise ConfigError(what, path, f"cannot be read: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(what, path, f"is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _parse_json(path: str, what: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(what, path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(what, path, "JSON nested too deeply to read") from None


# The most values a config may hold once its aliases are expanded: a few hundred bytes of
# nested aliases can stand for billions of values, which any later walk or repr() of the
# config would spend minutes on.
MAX_EXPANDED_VALUES = 100_000


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML's last-one-wins would
    hide a duplicated group or setting)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:  # the mapping's own keys: merged ones (<<) may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeLoader says so below
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {str(key)[:80]!r} (first at line {first.start_mark.line + 1}); "
                        "each key may appear once",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def expanded_size(value: object, limit: int = MAX_EXPANDED_VALUES) -> int:
    """How many values `value` holds with shared (aliased) parts counted at each use;
    ValueError past `limit`, or for a structure that contains itself."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(item: object) -> int:
        if not isinstance(item, (list, dict)):
            return 1
        key = id(item)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ValueError("an alias refers to a value that contains it")
        active.add(key)
        children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else item
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                raise ValueError(f"its aliases expand to more than {limit} values")
        active.discard(key)
        sizes[key] = total
        return total

    return size(value)


def _parse_yaml(path: str, what: str, text: str) -> object:
    try:
        data = yaml.load(text, Loader=ConfigLoader)
        expanded_size(data)
        return data
    except ValueError as exc:
        raise ConfigError(what, path, f"not read: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError(what, path, f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(what, path, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(what, path, "YAML nested too deeply to read") from None


def read_structured(path: str, what: str, json_only: bool = False) -> object:
    """The parsed content of a `.json` (or `json_only`: any) file as JSON, else as YAML."""
    text = _read_text(path, what)
    if json_only or path.endswith(".json"):
        return _parse_json(path, what, text)
    return _parse_yaml(path, what, text)
