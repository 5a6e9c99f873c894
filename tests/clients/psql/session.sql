-- Client-compatibility test: psql (simple query protocol). scripts/client-tests
-- runs it with psql -X -f and compares standard output with expected.out.
\set ON_ERROR_STOP on
DROP TABLE IF EXISTS client_psql;
CREATE TABLE client_psql (id bigint PRIMARY KEY, name text NOT NULL, score double precision, born date, ok boolean DEFAULT true);
INSERT INTO client_psql (id, name, score, born) VALUES (1, 'ada', 1.5, '1815-12-10'), (2, 'grace', 2.25, '1906-12-09'), (3, 'o''brien', NULL, NULL);
SELECT id, name, score, born, ok FROM client_psql ORDER BY id;
UPDATE client_psql SET score = score * 2, ok = false WHERE id = 2;
DELETE FROM client_psql WHERE id = 1;
SELECT id, name, score, born, ok FROM client_psql ORDER BY id;
SELECT count(*) AS n, sum(score) AS total FROM client_psql;
BEGIN;
INSERT INTO client_psql (id, name) VALUES (4, 'rolled back');
ROLLBACK;
SELECT count(*) AS n FROM client_psql WHERE id = 4;
-- psql's \copy: COPY ... FROM STDIN and TO STDOUT, with psql reading and
-- writing the files (the second into $WORK, which scripts/client-tests makes).
\copy client_psql (id, name, score) from 'tests/clients/psql/copy.csv' csv header
SELECT id, name, score, ok FROM client_psql WHERE id >= 10 ORDER BY id;
\getenv work WORK
\cd :work
\copy client_psql to 'client_psql.copy'
\! cat client_psql.copy
\copy (SELECT id, name FROM client_psql ORDER BY id) to 'client_psql.csv' with csv header force quote *
\! cat client_psql.csv
DROP TABLE client_psql;
