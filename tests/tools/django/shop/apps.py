import os

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self):
        # Diagnostic only (never set by scripts/tool-tests): with
        # TOOL_DJANGO_NO_UNNEST=1, bulk inserts use Django's generic
        # multi-row VALUES instead of PostgreSQL's INSERT ... SELECT * FROM
        # UNNEST(...), to see what fails after that.
        if os.environ.get("TOOL_DJANGO_NO_UNNEST"):
            from django.db.backends.postgresql import compiler
            from django.db.models.sql.compiler import SQLInsertCompiler

            compiler.SQLInsertCompiler.assemble_as_sql = SQLInsertCompiler.assemble_as_sql
