"""An import-linter contract for modules its import graph cannot see: the migrations.

lint-imports builds its graph by walking the folder of each root package (``service/``),
and skips any folder without an ``__init__.py``. The migrations live in the top-level
``alembic/`` folder, shipped as ``service.alembic`` through setuptools' package-dir, with
no ``__init__.py`` (one would shadow the Alembic library for anything run from the
repository's root; tests/test_packaging.py): a forbidden contract naming
``service.alembic`` would find no such module, and a migration importing the worker
would pass unseen. So this contract reads the folder's files itself.

    [[tool.importlinter.contracts]]
    type = "folder_imports"
    folder = "alembic/versions"               # from where lint-imports runs: the repository's root
    package = "service.alembic.versions"      # what the report calls its modules
    allowed_modules = ["alembic", "sqlalchemy"]   # and their descendants; the standard library always

Every import counts, at the top of a module or inside a function, relative ones included
(they are refused: a migration is not imported as part of a package). A folder with no
module in it breaks the contract: a check that sees nothing is not kept.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


@dataclass(frozen=True)
class IllegalImport:
    importer: str
    imported: str
    line_number: int


class FolderImportsContract(Contract):
    type_name = "folder_imports"

    folder = fields.StringField()
    package = fields.StringField()
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        files = sorted(Path(self.folder).glob("*.py"))
        if not files:
            return ContractCheck(kept=False, metadata={"illegal": [], "empty": True})
        illegal = [
            IllegalImport(f"{self.package}.{path.stem}", name, line)
            for path in files
            for name, line in imported_names(path)
            if not self.allows(name)
        ]
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal, "empty": False})

    def allows(self, name: str) -> bool:
        top = name.split(".")[0]
        if top in sys.stdlib_module_names:
            return True
        return any(name == allowed or name.startswith(allowed + ".") for allowed in self.allowed_modules)

    def render_broken_contract(self, check: ContractCheck) -> None:
        if check.metadata["empty"]:
            output.print_error(f"No module in {self.folder}: run lint-imports from the repository's root.", bold=False)
            output.new_line()
            return
        for each in check.metadata["illegal"]:
            output.print_error(f"- {each.importer} -> {each.imported} (l.{each.line_number})", bold=False)
        output.new_line()
        output.print(f"{self.folder} may import the standard library and {', '.join(self.allowed_modules)} only.")


def imported_names(path: Path) -> list[tuple[str, int]]:
    """Each module a file imports (``from a import b``: ``a.b``, which may be a name in ``a``), with its line."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.extend(
                (f"{base}.{alias.name}" if node.module else base + alias.name, node.lineno) for alias in node.names
            )
    return found
