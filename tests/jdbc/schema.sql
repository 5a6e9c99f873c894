-- The schema scripts/jdbc-compare loads into PostgreSQL 15 and into
-- Aqueduct before it compares what pgJDBC's DatabaseMetaData and
-- ResultSetMetaData report for it.
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE authors (
  id serial PRIMARY KEY,
  email varchar(120) NOT NULL UNIQUE,
  name text,
  active boolean NOT NULL DEFAULT true,
  joined timestamp,
  seen timestamptz
);
CREATE TABLE books (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  author_id int NOT NULL REFERENCES authors (id) ON DELETE CASCADE,
  isbn varchar(13),
  title text NOT NULL,
  price numeric(8, 2),
  ratio numeric,
  pages smallint,
  weight double precision,
  meta jsonb,
  tags text[],
  m mood DEFAULT 'ok',
  published date,
  UNIQUE (author_id, title)
);
CREATE INDEX books_title ON books (title);
CREATE UNIQUE INDEX books_isbn ON books (isbn);
CREATE TABLE editions (
  book_id bigint REFERENCES books (id),
  num int,
  code bigserial,
  released timestamptz NOT NULL,
  PRIMARY KEY (book_id, num)
);
CREATE TABLE reprints (
  id int PRIMARY KEY,
  book_id bigint NOT NULL,
  num int NOT NULL,
  reviewer int REFERENCES authors (id) ON UPDATE RESTRICT ON DELETE SET NULL,
  FOREIGN KEY (book_id, num) REFERENCES editions (book_id, num)
);
CREATE VIEW author_books AS
  SELECT a.id, a.name, count(*) AS n
  FROM authors a JOIN books b ON b.author_id = a.id
  GROUP BY a.id, a.name;
