"""Which line of a pasted YAML stream a manifest error's field path names."""

from __future__ import annotations

import re

import yaml

from workloads.manifests import ManifestError

# `spec.resourceGroups[0].flavors[1].resources[nvidia.com/gpu]` -> its keys and indexes.
_STEP = re.compile(r"\[([^\]]*)\]|([^.\[\]]+)")


def line_of(text: str, error: ManifestError) -> int | None:
    """The 1-based line of the field `error.path` names in document `error.document`, or of
    the nearest enclosing field that is there (a missing field is reported on its parent);
    None when the text does not parse (its own error says where) or names no document."""
    if error.document is None:
        return None
    try:
        documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    if not 1 <= error.document <= len(documents):
        return None
    node: yaml.Node = documents[error.document - 1]
    for index, key in _STEP.findall(error.path or ""):
        child = _child(node, index or key)
        if child is None:
            break
        node = child
    return int(node.start_mark.line) + 1


def _child(node: yaml.Node, step: str) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        return next((value for key, value in node.value if key.value == step), None)
    if isinstance(node, yaml.SequenceNode) and step.isdigit() and int(step) < len(node.value):
        child: yaml.Node = node.value[int(step)]
        return child
    return None


def with_line(text: str, error: ManifestError) -> str:
    """The error as the form shows it: "line N: " first when the field can be found."""
    line = line_of(text, error)
    return str(error) if line is None else f"line {line}: {error}"
