"""config/README.md from the config schema: one table per section, one row per key (its
type, default and description), so the README the Snakemake workflow catalog shows cannot
drift from what lmsat.planning validates (tests/test_module.py compares the two).

    python -m lmsat.planning.schema_doc workflow/schemas/config.schema.yaml > config/README.md
"""

from __future__ import annotations

import json
import sys

INTRO = """\
# Configuration

Generated from `workflow/schemas/config.schema.yaml` by
`python -m lmsat.planning.schema_doc workflow/schemas/config.schema.yaml > config/README.md`;
edit the schema, not this file.

`config/config.yaml` (the embedded toy suite) is the default; a `--configfile` (e.g.
`config/pythia.yaml`, `config/paper.yaml`) replaces it, and `--config key=value` overrides
merge over either. Used as a `module` of another workflow, lmsat plans the dict its
`config:` passes. Every key has a default except the ones marked required; the config is
validated before any job is planned, and an error names the key and the fix. Keys marked
*operational* choose how a job runs, never what it computes: changing them reruns nothing.
"""


class SchemaDocError(ValueError):
    """A schema key without a description (the README could not say what it does)."""


def _resolved(node: dict, schema: dict) -> tuple[dict, str]:
    """`node` merged over its `$ref` definition (its own keys win), and the definition's name."""
    if "$ref" not in node:
        return node, ""
    name = node["$ref"].rsplit("/", 1)[-1]
    return {**schema["$defs"][name], **{k: v for k, v in node.items() if k != "$ref"}}, name


def _link(name: str) -> str:
    return f"[{name}](#{name}-entries)"


def _type(node: dict, schema: dict) -> str:
    node, ref = _resolved(node, schema)
    if ref:
        return f"{_link(ref)} entry"
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    kinds = node.get("type", "any")
    kind = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if kind == "array":
        items, item_ref = _resolved(node.get("items", {}), schema)
        return f"list of {_link(item_ref)} entries" if item_ref else f"list of {_type(items, schema)}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        _, value_ref = _resolved(node["additionalProperties"], schema)
        return f"mapping: name -> {_link(value_ref)} entry" if value_ref else "mapping"
    return kind


def _default(node: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" not in node:
        return ""
    if node.get("properties") or node.get("$ref"):  # filled key by key (rows below, or its entries)
        return ""
    return f"`{json.dumps(node['default'])}`"


def _cell(text: str) -> str:
    """One line of Markdown: `|` escaped (table cells), `<` escaped outside code spans
    (results/<run>/ would otherwise be read as an HTML tag)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def _rows(properties: dict, required: list, schema: dict, prefix: str = ""):
    """(key, type, default, description) for every key under `properties`, nested ones
    (inline objects) as dotted keys; SchemaDocError for a key without a description."""
    for name, node in properties.items():
        key = f"{prefix}{name}"
        full, _ = _resolved(node, schema)
        description = full.get("description", "")
        if not description.strip():
            raise SchemaDocError(f"schema key {key!r} has no description; fix: give it one")
        if full.get("operational"):
            description += " *(operational)*"
        yield key, _type(node, schema), _default(node, name in required), description
        if "properties" in node:  # an inline section; a $ref'd one has its own table
            yield from _rows(node["properties"], node.get("required", []), schema, f"{key}.")


def _table(rows) -> list[str]:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {_cell(kind)} | {_cell(default)} | {_cell(text)} |" for key, kind, default, text in rows]
    return lines


def registered_metrics() -> list[str]:
    """The metrics a config may name, from the registry (lmsat.products.metrics), so the list cannot go stale."""
    from lmsat.products.metrics import METRICS

    lines = ["| metric | reads | what it measures |", "|---|---|---|"]
    lines += [f"| `{name}` | {metric.reads} | {_cell(metric.description)} |" for name, metric in METRICS.items()]
    return ["The registered metrics (`lmsat.products.metrics`):", "", *lines, ""]


def config_readme(schema: dict) -> str:
    """The Markdown of config/README.md for `schema` (the config schema as a dict)."""
    lines = [INTRO]
    required = schema.get("required", [])
    for name, node in schema["properties"].items():
        (key, kind, default, text), *rest = list(_rows({name: node}, required, schema))
        lines += [f"## `{key}`", "", _cell(text), "", f"Type: {kind}." + (f" Default: {default}." if default else ""), ""]
        if name == "metrics":
            lines += registered_metrics()
        if rest:
            lines += _table(rest) + [""]
    for name, node in schema.get("$defs", {}).items():
        rows = list(_rows(node.get("properties", {}), node.get("required", []), schema))
        if not node.get("description", "").strip():
            raise SchemaDocError(f"schema definition {name!r} has no description; fix: give it one")
        lines += [f"## {name} entries", "", _cell(node["description"]), ""] + _table(rows) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> None:
    from lmsat.planning.config_files import load_yaml

    if len(argv) != 1:
        raise SystemExit(__doc__)
    sys.stdout.write(config_readme(load_yaml(argv[0])))


if __name__ == "__main__":
    main(sys.argv[1:])
