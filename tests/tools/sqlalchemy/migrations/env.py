"""Alembic environment of the tool case: the connection and the target
metadata come from the caller (run.py) through config.attributes."""
from alembic import context

config = context.config
connection = config.attributes["connection"]


def include_name(name, type_, parent_names):
    # Only this case's tables (sa_*): the database may hold other tools' tables.
    return type_ != "table" or name.startswith("sa_")


context.configure(connection=connection, target_metadata=config.attributes["target_metadata"],
                  compare_type=True, compare_server_default=False, include_name=include_name)
with context.begin_transaction():
    context.run_migrations()
