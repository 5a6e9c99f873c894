"""The SQLAlchemy models of the tool case, in two versions: V1 is created
with create_all; V2 is what Alembic's autogenerate compares the database
with (a table, columns and an index added, a column dropped)."""
from sqlalchemy import (ARRAY, Boolean, Column, DateTime, ForeignKey, Index, Integer, MetaData, Numeric, String,
                        Table, Text, UniqueConstraint, func)
from sqlalchemy.dialects.postgresql import JSONB


# Named foreign keys, so that Alembic's downgrade can drop the one it adds.
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def v1():
    md = MetaData(naming_convention=NAMING)
    Table("sa_author", md,
          Column("id", Integer, primary_key=True),
          Column("name", String(100), nullable=False, unique=True),
          Column("email", String(200)),
          Column("created_at", DateTime(timezone=True), server_default=func.now(), nullable=False))
    Table("sa_book", md,
          Column("id", Integer, primary_key=True),
          Column("title", String(200), nullable=False),
          Column("author_id", Integer, ForeignKey("sa_author.id", ondelete="CASCADE"), nullable=False),
          Column("price", Numeric(10, 2)),
          Column("in_print", Boolean, nullable=False, server_default="true"),
          Column("tags", ARRAY(Text)),
          Index("ix_sa_book_title", "title"))
    Table("sa_review", md,
          Column("id", Integer, primary_key=True),
          Column("book_id", Integer, ForeignKey("sa_book.id", ondelete="CASCADE"), nullable=False),
          Column("reviewer", String(100), nullable=False),
          Column("rating", Integer, nullable=False),
          Column("body", Text),
          UniqueConstraint("book_id", "reviewer", name="uq_sa_review_book_reviewer"))
    return md


def v2():
    md = MetaData(naming_convention=NAMING)
    Table("sa_publisher", md,
          Column("id", Integer, primary_key=True),
          Column("name", String(100), nullable=False, unique=True),
          Column("meta", JSONB))
    Table("sa_author", md,
          Column("id", Integer, primary_key=True),
          Column("name", String(100), nullable=False, unique=True),
          Column("email", String(200)),
          Column("created_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
          Index("ix_sa_author_email", "email"))
    Table("sa_book", md,
          Column("id", Integer, primary_key=True),
          Column("title", String(200), nullable=False),
          Column("author_id", Integer, ForeignKey("sa_author.id", ondelete="CASCADE"), nullable=False),
          Column("price", Numeric(10, 2)),
          Column("in_print", Boolean, nullable=False, server_default="true"),
          Column("tags", ARRAY(Text)),
          Column("isbn", String(20)),
          Column("publisher_id", Integer, ForeignKey("sa_publisher.id", ondelete="SET NULL")),
          Index("ix_sa_book_title", "title"))
    Table("sa_review", md,
          Column("id", Integer, primary_key=True),
          Column("book_id", Integer, ForeignKey("sa_book.id", ondelete="CASCADE"), nullable=False),
          Column("reviewer", String(100), nullable=False),
          Column("rating", Integer, nullable=False),
          UniqueConstraint("book_id", "reviewer", name="uq_sa_review_book_reviewer"))
    return md
