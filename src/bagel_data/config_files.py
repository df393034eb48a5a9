"""Reading a YAML or JSON config file, with every failure a `ConfigError` naming the file.

A syntax error names the line and column; a folder, an unreadable file, non-UTF-8 bytes or
nesting too deep to parse are errors too, never a raw parser exception.
"""

from __future__ import annotations

import json

import yaml

from .errors import ConfigError
from .sources import storage


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


def _parse_yaml(path: str, what: str, text: str) -> object:
    try:
        return yaml.safe_load(text)
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
