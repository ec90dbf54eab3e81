"""The docs' reference pages are generated from the code that defines what they list
(``python -m sparta.docgen --write``, :mod:`sparta.docgen`): the committed pages are what it
writes, each page lists everything its source defines, and the architecture page names every
module of the package."""

import importlib
import re

import pytest

from sparta import cli, docgen, schema, tables

PAGES = [docgen.CONFIG_PAGE, docgen.TABLES_PAGE, docgen.CLI_PAGE]
ARCHITECTURE = docgen.DOCS / "development" / "architecture.md"
API = docgen.DOCS / "reference" / "api.md"
PACKAGE = docgen.REPO / "workflow" / "sparta"


@pytest.fixture(scope="module")
def generated():
    return docgen.outputs()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_generated_pages_are_up_to_date(path, generated):
    assert path.exists() and path.read_text() == generated[path], (
        f"{path.relative_to(docgen.REPO)} differs from the code it is generated from: "
        f"run {docgen.COMMAND} and commit the result"
    )


def test_every_generated_file_is_written_by_the_one_command(generated):
    assert set(schema.outputs()) <= set(generated)
    assert set(PAGES) <= set(generated)


def _keys(node: dict, prefix: str = ""):
    """Every dotted key of a schema node (list items as ``[]``, free-form names skipped)."""
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}{name}"
        yield key
        if sub.get("type") == "array" or "array" in sub.get("type", ()):
            yield from _keys(sub.get("items", {}), f"{key}[].")
        else:
            yield from _keys(sub, f"{key}.")
        extra = sub.get("additionalProperties")
        if isinstance(extra, dict) and "properties" in extra:
            yield from _keys(extra, f"{key}.<name>.")


def test_config_page_lists_every_key_of_the_schema(generated):
    page = generated[docgen.CONFIG_PAGE]
    listed = set(re.findall(r"^\| `([^`]+)` \|", page, re.M)) | set(re.findall(r"^## `([^`]+)`$", page, re.M))
    missing = [k for k in _keys(schema.schema()) if k not in listed]
    assert not missing, f"config keys missing from the reference: {missing}"


def test_config_page_states_defaults_bounds_and_sources(generated):
    page = generated[docgen.CONFIG_PAGE]
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([^`]+)` \|.*$", page, re.M)}
    assert "`20`" in rows["reputation.scale"] and "Preset `paper`: 1 (none)." in rows["reputation.scale"]
    alpha = rows["matchmaking.alpha"]
    assert "in [0, 1]" in alpha and "Source of the default: paper." in alpha
    assert "(config.yaml: `12`)" in rows["prompts.per_iteration"]
    assert "`0`" in rows["resources.convert.gpu"]  # the parent's default, not the class's
    assert "required" in rows["members[].name"] and "`sparta`" in rows["reputation.preset"]


def test_tables_page_lists_every_column_of_every_table(generated):
    page = generated[docgen.TABLES_PAGE]
    for kind, columns in tables.SCHEMAS.items():
        if kind in tables.SAME_SCHEMA:
            assert f"`{kind}`" in page
            continue
        section = page.split(f"### `{kind}`\n", 1)[1].split("\n### ", 1)[0]
        for field in columns:
            assert f"| `{field.name}` | `" in section, f"{kind}.{field.name} missing"


def test_cli_page_lists_every_command_and_option(generated):
    page = generated[docgen.CLI_PAGE]
    parser = cli.parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    for name, command in sub.choices.items():
        assert f"## `sparta {name}`" in page
        for action in command._actions:
            for flag in action.option_strings:
                assert flag in ("-h", "--help") or f"`{flag}`" in page, f"sparta {name} {flag}"


def test_usage_lines_parse_with_the_parser():
    """Each usage line names the options the parser takes, with their values."""
    parser = cli.parser()
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    line = docgen.usage("sparta export", sub.choices["export"])
    assert line.startswith("sparta export run out [--member MEMBER]")
    assert "[--merge]" in line and "[--dtype {auto,float32,bfloat16,float16}]" in line


def test_generated_pages_cite_no_issue_numbers(generated):
    for path, text in generated.items():
        if path.suffix == ".md":
            assert not re.search(r"issue [0-9]+", text, re.I), path.name


def _modules() -> list[str]:
    """Every module and subpackage of workflow/sparta as imported: sparta.x, sparta.methods.y."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_architecture_page_names_every_module():
    text = ARCHITECTURE.read_text()
    missing = [m for m in _modules() if m != "sparta" and not re.search(rf"`{re.escape(m)}`", text)]
    assert not missing, f"docs/development/architecture.md does not name: {missing}"


def test_api_page_names_modules_that_import():
    blocks = re.findall(r"^::: ([\w.]+)", API.read_text(), re.M)
    assert blocks
    for name in blocks:
        importlib.import_module(name)
