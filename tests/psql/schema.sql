-- The schema scripts/psql-compare loads into PostgreSQL 15 and into
-- Aqueduct before it compares what psql's \d commands print.
CREATE TABLE users (id serial PRIMARY KEY, email varchar(255) UNIQUE NOT NULL, name text DEFAULT 'x', score numeric(10,2));
CREATE TABLE posts (id bigserial PRIMARY KEY, user_id int REFERENCES users(id) ON DELETE CASCADE, title text CHECK (length(title) > 0), body text NOT NULL DEFAULT '', created_at timestamptz DEFAULT now(), tags text[]);
CREATE INDEX posts_title ON posts (title);
CREATE UNIQUE INDEX posts_user_title ON posts (user_id, title);
CREATE VIEW user_posts AS SELECT u.id, count(*) AS n FROM users u JOIN posts p ON p.user_id = u.id GROUP BY u.id;
CREATE SEQUENCE tickets START 100;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE people (id int PRIMARY KEY, m mood NOT NULL DEFAULT 'ok', doc jsonb, born date, at timestamp, ident bigint GENERATED ALWAYS AS IDENTITY);
CREATE PUBLICATION social FOR TABLE users (id, name), posts WHERE (length(title) > 3);
CREATE PUBLICATION everything FOR ALL TABLES WITH (publish = 'insert, update');
