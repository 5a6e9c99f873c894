// Client-compatibility test: Go pgx v5 against a running server.
//
// Connects with the libpq environment variables (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE), works on its own table `client_go`, and exits
// non-zero with a message naming the first mismatch.
// CLIENT_TEST_TARGET=postgres skips the Aqueduct-only checks, to debug this
// program against PostgreSQL. Run by scripts/client-tests.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

const table = "client_go"

var aqueduct = os.Getenv("CLIENT_TEST_TARGET") == "" || os.Getenv("CLIENT_TEST_TARGET") == "aqueduct"

type failure string

func fail(format string, args ...any) {
	panic(failure(fmt.Sprintf(format, args...)))
}

func check(what string, got, want any) {
	if !reflect.DeepEqual(got, want) {
		fail("%s: got %#v, want %#v", what, got, want)
	}
}

func must(err error, what string) {
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			fail("%s: SQLSTATE %s: %s", what, pgErr.Code, pgErr.Message)
		}
		fail("%s: %v", what, err)
	}
}

func expectCode(what string, err error, code string) {
	var pgErr *pgconn.PgError
	if err == nil {
		fail("%s: succeeded, want an error with SQLSTATE %s", what, code)
	}
	if !errors.As(err, &pgErr) {
		fail("%s: got %T (%v), want a *pgconn.PgError with SQLSTATE %s", what, err, err, code)
	}
	if pgErr.Code != code {
		fail("%s: got SQLSTATE %s (%s), want %s", what, pgErr.Code, pgErr.Message, code)
	}
}

// row is one row of every supported type, at the edges: widest integers,
// bytes that need escaping, non-ASCII text, a leap day, a zone other than UTC.
type row struct {
	ID    int64
	Small int16
	I     int32
	Big   int64
	R     float32
	D     float64
	N     pgtype.Numeric
	B     bool
	T     string
	V     string
	By    []byte
	Ts    time.Time
	Tstz  time.Time
	Dt    time.Time
	U     pgtype.UUID
	J     map[string]any
	Js    map[string]any
	Note  string
}

const columns = "id, small, i, big, r, d, n, b, t, v, by, ts, tstz, dt, u, j, js"

func (r *row) params() []any {
	return []any{r.ID, r.Small, r.I, r.Big, r.R, r.D, r.N, r.B, r.T, r.V, r.By, r.Ts, r.Tstz, r.Dt, r.U, r.J, r.Js}
}

func (r *row) dests() []any {
	return []any{&r.ID, &r.Small, &r.I, &r.Big, &r.R, &r.D, &r.N, &r.B, &r.T, &r.V, &r.By, &r.Ts, &r.Tstz, &r.Dt, &r.U, &r.J, &r.Js}
}

func numeric(s string) pgtype.Numeric {
	var n pgtype.Numeric
	must(n.Scan(s), "parse numeric "+s)
	return n
}

func numericString(n pgtype.Numeric) string {
	v, err := n.Value()
	must(err, "numeric value")
	return fmt.Sprint(v)
}

func main() {
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				fmt.Fprintf(os.Stderr, "client go: FAILED: %s\n", f)
				os.Exit(1)
			}
			panic(r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig("connect_timeout=10")
	must(err, "parse config")
	conn, err := pgx.ConnectConfig(ctx, cfg)
	must(err, "connect")
	defer conn.Close(context.Background())
	run(ctx, conn)
	fmt.Println("client go: ok")
}

func run(ctx context.Context, conn *pgx.Conn) {
	exec := func(sql string, args ...any) pgconn.CommandTag {
		tag, err := conn.Exec(ctx, sql, args...)
		must(err, sql)
		return tag
	}
	count := func(where string, args ...any) int64 {
		var n int64
		must(conn.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE "+where, args...).Scan(&n), "count "+where)
		return n
	}

	exec("DROP TABLE IF EXISTS " + table)
	exec(`CREATE TABLE ` + table + ` (
		id bigint PRIMARY KEY,
		small smallint,
		i integer,
		big bigint,
		r real,
		d double precision,
		n numeric,
		b boolean,
		t text,
		v varchar(20),
		by bytea,
		ts timestamp,
		tstz timestamptz,
		dt date,
		u uuid,
		j jsonb,
		js json,
		note text NOT NULL DEFAULT 'none'
	)`)

	want := row{
		ID:    1,
		Small: -32768,
		I:     2147483647,
		Big:   9223372036854775807,
		R:     1.5,
		D:     3.141592653589793,
		N:     numeric("1234567890123456.789012345678"),
		B:     true,
		T:     "it's \"quoted\" \\ ünïcödé ✓ 🚀",
		V:     "short",
		By:    append([]byte{0, 1, 2, 39, 92, 127, 128, 255}, "é"...),
		Ts:    time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.UTC),
		Tstz:  time.Date(2024, 3, 5, 12, 34, 56, 789012000, time.FixedZone("+02", 2*3600)),
		Dt:    time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		U:     pgtype.UUID{Bytes: [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}, Valid: true},
		J:     map[string]any{"a": 1.0, "b": []any{true, nil, "x"}, "nested": map[string]any{"k": "v"}},
		Js:    map[string]any{"plain": "json", "n": 2.5},
		Note:  "none",
	}

	// Insert with a parameter of every type; RETURNING gives the row back.
	ph := make([]string, 17)
	for k := range ph {
		ph[k] = "$" + strconv.Itoa(k+1)
	}
	var id int64
	var note string
	must(conn.QueryRow(ctx, "INSERT INTO "+table+" ("+columns+") VALUES ("+strings.Join(ph, ", ")+") RETURNING id, note",
		want.params()...).Scan(&id, &note), "INSERT ... RETURNING")
	check("INSERT ... RETURNING", []any{id, note}, []any{int64(1), "none"})
	lsnText := conn.PgConn().ParameterStatus("aqueduct.last_lsn")
	lsn1, lsnErr := strconv.ParseUint(lsnText, 10, 64)
	if aqueduct {
		if lsnErr != nil || lsn1 == 0 {
			fail("ParameterStatus aqueduct.last_lsn after a write: got %q, want a positive integer", lsnText)
		}
		var shown string
		must(conn.QueryRow(ctx, "SHOW aqueduct.last_lsn").Scan(&shown), "SHOW aqueduct.last_lsn")
		check("SHOW aqueduct.last_lsn", shown, lsnText)
	}

	// Read back, in pgx's default (binary results) and with the simple
	// protocol (text results, parameters interpolated by pgx).
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		var got row
		must(conn.QueryRow(ctx, "SELECT "+columns+", note FROM "+table+" WHERE id = $1", mode, int64(1)).
			Scan(append(got.dests(), &got.Note)...), "SELECT row "+mode.String())
		what := func(c string) string { return "column " + c + " (" + mode.String() + ")" }
		check(what("id"), got.ID, want.ID)
		check(what("small"), got.Small, want.Small)
		check(what("i"), got.I, want.I)
		check(what("big"), got.Big, want.Big)
		check(what("r"), got.R, want.R)
		check(what("d"), got.D, want.D)
		check(what("n"), numericString(got.N), numericString(want.N))
		check(what("b"), got.B, want.B)
		check(what("t"), got.T, want.T)
		check(what("v"), got.V, want.V)
		check(what("by"), got.By, want.By)
		if !got.Ts.Equal(want.Ts) || got.Ts.Location() != time.UTC {
			fail("%s: got %v, want %v", what("ts"), got.Ts, want.Ts)
		}
		if !got.Tstz.Equal(want.Tstz) {
			fail("%s: got %v, want %v", what("tstz"), got.Tstz, want.Tstz)
		}
		if !got.Dt.Equal(want.Dt) {
			fail("%s: got %v, want %v", what("dt"), got.Dt, want.Dt)
		}
		check(what("u"), got.U, want.U)
		check(what("j"), got.J, want.J)
		check(what("js"), got.Js, want.Js)
		check(what("note"), got.Note, want.Note)
	}

	// NULLs of every type, and a multi-row insert.
	ph2 := make([]string, 17)
	nulls := make([]any, 0, 34)
	for k := range ph2 {
		ph2[k] = "$" + strconv.Itoa(k+18)
	}
	nulls = append(nulls, int64(2))
	for k := 1; k < 17; k++ {
		nulls = append(nulls, nil)
	}
	nulls = append(nulls, int64(3))
	for k := 1; k < 17; k++ {
		nulls = append(nulls, nil)
	}
	tag := exec("INSERT INTO "+table+" ("+columns+") VALUES ("+strings.Join(ph, ", ")+"), ("+strings.Join(ph2, ", ")+")", nulls...)
	check("multi-row INSERT tag", tag.String(), "INSERT 0 2")
	var (
		nSmall *int16
		nText  *string
		nBytes []byte
		nTime  *time.Time
		nUUID  pgtype.UUID
		nJSON  map[string]any
		nNum   pgtype.Numeric
	)
	must(conn.QueryRow(ctx, "SELECT small, t, by, tstz, u, j, n FROM "+table+" WHERE id = $1", int64(3)).
		Scan(&nSmall, &nText, &nBytes, &nTime, &nUUID, &nJSON, &nNum), "SELECT NULLs")
	if nSmall != nil || nText != nil || nBytes != nil || nTime != nil || nUUID.Valid || nJSON != nil || nNum.Valid {
		fail("NULLs read back: got %v %v %v %v %v %v %v", nSmall, nText, nBytes, nTime, nUUID, nJSON, nNum)
	}

	// Parameters in WHERE of several types.
	var found []int64
	rows, err := conn.Query(ctx, "SELECT id FROM "+table+" WHERE u = $1 AND tstz = $2 AND b = $3 AND by = $4 AND n = $5",
		want.U, want.Tstz, true, want.By, want.N)
	must(err, "SELECT with parameters in WHERE")
	found, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	must(err, "SELECT with parameters in WHERE")
	check("SELECT with parameters in WHERE", found, []int64{1})

	// UPDATE ... RETURNING; UPSERT.
	var t string
	var small int16
	must(conn.QueryRow(ctx, "UPDATE "+table+" SET t = $1, small = small + 1 WHERE id = $2 RETURNING t, small", "updated", int64(1)).
		Scan(&t, &small), "UPDATE ... RETURNING")
	check("UPDATE ... RETURNING", []any{t, small}, []any{"updated", int16(-32767)})
	must(conn.QueryRow(ctx, "INSERT INTO "+table+" (id, t) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET t = excluded.t RETURNING id, t",
		int64(2), "upserted").Scan(&id, &t), "INSERT ... ON CONFLICT DO UPDATE")
	check("INSERT ... ON CONFLICT DO UPDATE", []any{id, t}, []any{int64(2), "upserted"})
	tag = exec("INSERT INTO "+table+" (id, t) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", int64(2), "ignored")
	check("ON CONFLICT DO NOTHING tag", tag.String(), "INSERT 0 0")

	// Aggregates.
	var n, hi int64
	var lo string
	must(conn.QueryRow(ctx, "SELECT count(*), max(id), min(t) FROM "+table).Scan(&n, &hi, &lo), "aggregates")
	check("aggregates", []any{n, hi, lo}, []any{int64(3), int64(3), "updated"})

	// Transactions: a rolled-back one leaves nothing; a committed one stays.
	tx, err := conn.Begin(ctx)
	must(err, "BEGIN")
	_, err = tx.Exec(ctx, "INSERT INTO "+table+" (id, t) VALUES ($1, $2)", int64(10), "rolled back")
	must(err, "INSERT in a transaction")
	must(tx.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE id = $1", int64(10)).Scan(&n), "own write")
	check("own write inside a transaction", n, int64(1))
	must(tx.Rollback(ctx), "ROLLBACK")
	check("row of a rolled-back transaction", count("id = $1", int64(10)), int64(0))
	tx, err = conn.Begin(ctx)
	must(err, "BEGIN")
	_, err = tx.Exec(ctx, "INSERT INTO "+table+" (id, t) VALUES ($1, $2)", int64(11), "committed")
	must(err, "INSERT in a transaction")
	_, err = tx.Exec(ctx, "UPDATE "+table+" SET note = $1 WHERE id = $2", "in txn", int64(11))
	must(err, "UPDATE in a transaction")
	must(tx.Commit(ctx), "COMMIT")
	must(conn.QueryRow(ctx, "SELECT t, note FROM "+table+" WHERE id = $1", int64(11)).Scan(&t, &note), "read committed row")
	check("row of a committed transaction", []any{t, note}, []any{"committed", "in txn"})
	if aqueduct {
		s := conn.PgConn().ParameterStatus("aqueduct.last_lsn")
		lsn2, err := strconv.ParseUint(s, 10, 64)
		if err != nil || lsn2 <= lsn1 {
			fail("aqueduct.last_lsn did not advance after a commit: %d then %q", lsn1, s)
		}
	}

	// A batch: several statements pipelined under one Sync.
	batch := &pgx.Batch{}
	batch.Queue("INSERT INTO "+table+" (id, t) VALUES ($1, $2)", int64(20), "batch a")
	batch.Queue("INSERT INTO "+table+" (id, t) VALUES ($1, $2)", int64(21), "batch b")
	batch.Queue("SELECT count(*) FROM "+table+" WHERE id >= $1", int64(20))
	br := conn.SendBatch(ctx, batch)
	_, err = br.Exec()
	must(err, "batch insert 1")
	_, err = br.Exec()
	must(err, "batch insert 2")
	must(br.QueryRow().Scan(&n), "batch count")
	must(br.Close(), "batch close")
	check("count after a batch", n, int64(2))
	exec("DELETE FROM "+table+" WHERE id >= $1", int64(20))

	// Errors carry their SQLSTATE; the connection stays usable.
	_, err = conn.Exec(ctx, "SELECT * FROM client_go_no_such_table")
	expectCode("SELECT from a missing table", err, "42P01")
	_, err = conn.Exec(ctx, "INSERT INTO "+table+" (id) VALUES ($1)", int64(1))
	expectCode("INSERT of a duplicate key", err, "23505")
	tx, err = conn.Begin(ctx)
	must(err, "BEGIN")
	_, err = tx.Exec(ctx, "INSERT INTO "+table+" (id, t) VALUES ($1, $2)", int64(12), "doomed")
	must(err, "INSERT in a transaction")
	_, err = tx.Exec(ctx, "SELECT * FROM client_go_no_such_table")
	expectCode("SELECT from a missing table in a transaction", err, "42P01")
	err = tx.Commit(ctx)
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		fail("COMMIT of a failed transaction: got %v, want pgx.ErrTxCommitRollback", err)
	}
	check("row of a transaction that failed", count("id = $1", int64(12)), int64(0))

	// DELETE ... RETURNING, then the table holds what is left.
	rows, err = conn.Query(ctx, "DELETE FROM "+table+" WHERE id IN ($1, $2) RETURNING id", int64(2), int64(3))
	must(err, "DELETE ... RETURNING")
	found, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	must(err, "DELETE ... RETURNING")
	if len(found) == 2 && found[0] > found[1] {
		found[0], found[1] = found[1], found[0]
	}
	check("DELETE ... RETURNING", found, []int64{2, 3})
	tag = exec("DELETE FROM "+table+" WHERE id = $1", int64(999))
	check("DELETE of no row tag", tag.String(), "DELETE 0")
	rows, err = conn.Query(ctx, "SELECT id FROM "+table+" ORDER BY id DESC LIMIT 5")
	must(err, "SELECT ORDER BY")
	found, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	must(err, "SELECT ORDER BY")
	check("rows left", found, []int64{11, 1})

	// A numeric whose digits only fit a big.Int (28 significant digits, the
	// most docs/sql.md promises), sent in pgx's binary numeric format.
	huge, _ := new(big.Int).SetString("1234567890123456789012345678", 10)
	exec("UPDATE "+table+" SET n = $1 WHERE id = $2", pgtype.Numeric{Int: huge, Exp: -5, Valid: true}, int64(11))
	var got pgtype.Numeric
	must(conn.QueryRow(ctx, "SELECT n FROM "+table+" WHERE id = $1", int64(11)).Scan(&got), "SELECT numeric")
	check("numeric with 28 digits", numericString(got), "12345678901234567890123.45678")

	exec("DROP TABLE " + table)
}
