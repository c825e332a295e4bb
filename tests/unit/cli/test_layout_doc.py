"""docs/layout.md is the newcomer's map: it names every package of the product, and every module
of the two layers it maps module by module (the proxy and the runner), so a folder or module
added without a place on the map fails here."""

from __future__ import annotations

from pathlib import Path

from tests.support.layout import ROOT, package_dirs

MAPPED_MODULE_BY_MODULE = ("proxy", "runner")


def layout_doc() -> str:
    return (ROOT / "docs" / "layout.md").read_text()


def packages() -> list[Path]:
    """Every product package folder, relative to the checkout (each once: faultproxy/'s links
    lead to the same folders)."""
    folders = {folder.resolve() for folder in package_dirs().values()}
    return sorted({init.parent.resolve().relative_to(ROOT.resolve()) for folder in folders
                   for init in folder.rglob("__init__.py") if "__pycache__" not in init.parts})


def unnamed(doc: str) -> list[str]:
    missing = [f"{package.as_posix()}/" for package in packages() if f"{package.name}/`" not in doc]
    for layer in MAPPED_MODULE_BY_MODULE:
        missing += [f"{layer}/{module.name}" for module in sorted((ROOT / layer).glob("*.py"))
                    if module.name != "__init__.py" and f"`{module.name}`" not in doc]
    return missing


def test_the_layout_names_every_package_and_mapped_module() -> None:
    missing = unnamed(layout_doc())
    assert not missing, "docs/layout.md does not name: " + ", ".join(missing)


def test_an_unnamed_package_or_module_is_caught() -> None:
    doc = layout_doc()
    assert unnamed(doc.replace("stdio/`", "stdio`")) == ["proxy/stdio/"]
    assert unnamed(doc.replace("`relay.py`", "relay")) == ["proxy/relay.py"]
