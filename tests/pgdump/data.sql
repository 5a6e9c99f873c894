-- Rows loaded (after tests/psql/schema.sql) into the Aqueduct database
-- scripts/pgdump-roundtrip dumps: NULLs, quotes, tabs, backslashes and
-- newlines in text, arrays, jsonb, timestamps, an enum, identity and
-- serial values, a sequence moved on, and comments.
INSERT INTO users (email, name, score) VALUES
  ('ann@example.com', 'Ann', 12.50),
  ('bob@example.com', NULL, NULL),
  ('o''hara@example.com', E'tab\there\nnew line \\ back', -0.01);
INSERT INTO posts (user_id, title, body, created_at, tags) VALUES
  (1, 'first', 'hello', '2026-01-02 03:04:05+00', ARRAY['a', 'b c', 'd"e']),
  (1, 'second', '', '2026-02-03 04:05:06.789+00', '{}'),
  (3, 'third', E'multi\nline', NULL, NULL);
INSERT INTO people (id, m, doc, born, at) VALUES
  (1, 'happy', '{"a": [1, 2, {"b": null}], "s": "x\"y \\ z"}', '1990-05-06', '2026-03-04 05:06:07'),
  (2, 'sad', NULL, NULL, NULL),
  (3, DEFAULT, '[]', '2000-02-29', '1999-12-31 23:59:59.999999');
SELECT nextval('tickets');
SELECT nextval('tickets');
COMMENT ON TABLE users IS 'people who post';
COMMENT ON COLUMN users.email IS 'login; it''s unique';
COMMENT ON VIEW user_posts IS 'posts per user';
COMMENT ON SEQUENCE tickets IS 'ticket numbers';
COMMENT ON TYPE mood IS 'how one feels';
COMMENT ON COLUMN people.ident IS E'line one\nline two';
