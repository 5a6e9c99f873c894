package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Aqueduct over the PostgreSQL protocol: writes are upserts into kv sent to
// the node that accepts writes; reads are point SELECTs on each node in turn,
// at aqueduct.consistency = -aqueduct-read-consistency (eventual by default:
// the node answers from what it holds, like etcd's serializable reads and
// ZooKeeper's reads).
type aqSystem struct {
	cfg config

	mu     sync.Mutex
	writer int // index into cfg.endpoints of the node that took the last probe write; -1 if none yet
	gen    int // counts the answers found so far
}

const (
	aqCreate = `CREATE TABLE IF NOT EXISTS kv (k text PRIMARY KEY, v text)`
	aqUpsert = `INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v`
	aqSelect = `SELECT v FROM kv WHERE k = $1`
	// SQLSTATE read_only_sql_transaction: this node does not take writes.
	aqNotWriter = "25006"
)

func newAqueduct(cfg config) *aqSystem { return &aqSystem{cfg: cfg, writer: -1} }

// connect opens a session on endpoint i. With no users configured the server
// trusts loopback clients, so the user name is only a name.
func (s *aqSystem) connect(ctx context.Context, i int, reads bool) (*pgx.Conn, error) {
	url := fmt.Sprintf("postgres://aqueduct@%s/aqueduct?sslmode=disable&connect_timeout=%d",
		s.cfg.endpoints[i], max(1, int(s.cfg.opTimeout.Seconds())))
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.cfg.endpoints[i], err)
	}
	if reads && s.cfg.aqConsist != "" {
		level := strings.ReplaceAll(s.cfg.aqConsist, "'", "''")
		if _, err := c.Exec(ctx, "SET aqueduct.consistency = '"+level+"'"); err != nil {
			closeConn(c)
			return nil, fmt.Errorf("%s: %w", s.cfg.endpoints[i], err)
		}
	}
	return c, nil
}

// closeConn ends a session without waiting long for a server that is gone.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx)
}

func isNotWriter(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == aqNotWriter
}

// findWriter returns the index of the node that takes writes and the
// generation of that answer. This is the only place that knows which node
// is the leader. The answer is kept and shared by all clients. A client
// whose answer turned out wrong (the node refused a write with 25006, or
// could not be reached) passes that answer's generation as stale; unless
// another client has found a newer answer meanwhile, every node is then
// asked again: each is asked which member leads (SHOW CLUSTER; run.sh
// gives endpoint i the member id i+1) and sent the CREATE TABLE of setup
// and one upsert, and the first that leads and takes both is the writer
// (any node takes writes, the others by running them on the leader, which
// would add a hop etcd's and ZooKeeper's leaders do not take). Pass -1 to
// take any answer.
func (s *aqSystem) findWriter(ctx context.Context, stale int) (int, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer >= 0 && s.gen != stale {
		return s.writer, s.gen, nil
	}
	s.writer = -1
	var errs []error
	for i := range s.cfg.endpoints {
		c, err := s.connect(ctx, i, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = c.Exec(ctx, aqCreate)
		if err == nil {
			_, err = c.Exec(ctx, aqUpsert, "clusterbench-ready", "1")
		}
		if err == nil {
			err = leads(ctx, c, i+1)
		}
		closeConn(c)
		if err == nil {
			s.writer = i
			s.gen++
			return i, s.gen, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.cfg.endpoints[i], err))
	}
	return -1, 0, fmt.Errorf("no node takes writes: %w", errors.Join(errs...))
}

// leads says whether member id leads the group, as the node behind c
// sees it.
func leads(ctx context.Context, c *pgx.Conn, id int) error {
	rows, err := c.Query(ctx, "SHOW CLUSTER", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return err
		}
		if fmt.Sprint(values[0]) == fmt.Sprint(id) && fmt.Sprint(values[3]) == "leader" {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return fmt.Errorf("member %d does not lead", id)
}

// each calls f with a reading session on each node.
func (s *aqSystem) each(ctx context.Context, f func(ctx context.Context, c *pgx.Conn) error) error {
	for i, ep := range s.cfg.endpoints {
		c, err := s.connect(ctx, i, true)
		if err != nil {
			return err
		}
		err = f(ctx, c)
		closeConn(c)
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
	}
	return nil
}

func aqGet(ctx context.Context, c *pgx.Conn, key string) error {
	var v string
	err := c.QueryRow(ctx, aqSelect, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return errMissing
	}
	return err
}

func (s *aqSystem) Ready(ctx context.Context) error {
	if _, _, err := s.findWriter(ctx, -1); err != nil {
		return err
	}
	return s.each(ctx, func(ctx context.Context, c *pgx.Conn) error {
		return aqGet(ctx, c, "clusterbench-ready")
	})
}

func (s *aqSystem) Setup(ctx context.Context, keys int, value []byte) error {
	// 100 rows per INSERT.
	const batch = 100
	for lo := 0; lo < keys; lo += batch {
		var sql strings.Builder
		var args []any
		sql.WriteString("INSERT INTO kv (k, v) VALUES ")
		for i := lo; i < min(lo+batch, keys); i++ {
			if i > lo {
				sql.WriteString(", ")
			}
			fmt.Fprintf(&sql, "($%d, $%d)", len(args)+1, len(args)+2)
			args = append(args, keyName(i), string(value))
		}
		sql.WriteString(" ON CONFLICT (k) DO UPDATE SET v = excluded.v")
		stale := -1
		err := retry(ctx, func(ctx context.Context) error {
			w, gen, err := s.findWriter(ctx, stale)
			if err != nil {
				return err
			}
			c, err := s.connect(ctx, w, false)
			if err != nil {
				stale = gen
				return err
			}
			defer closeConn(c)
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			_, err = c.Exec(tctx, sql.String(), args...)
			if isNotWriter(err) {
				stale = gen
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	last := keyName(keys - 1)
	return s.each(ctx, func(ctx context.Context, c *pgx.Conn) error {
		return retry(ctx, func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			return aqGet(tctx, c, last)
		})
	})
}

func (s *aqSystem) NewClient(ctx context.Context, id int) (Client, error) {
	c := &aqClient{sys: s, stale: -1}
	if s.cfg.mode == "write" {
		if err := c.connectWriter(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	c.readers = make([]*pgx.Conn, len(s.cfg.endpoints))
	for i := range c.readers {
		r, err := s.connect(ctx, i, true)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.readers[i] = r
	}
	c.next = id % len(c.readers)
	return c, nil
}

func (s *aqSystem) Close() {}

type aqClient struct {
	sys     *aqSystem
	conn    *pgx.Conn   // write mode: session on the writer
	gen     int         // generation of the writer conn is on
	stale   int         // generation found wrong, or -1
	readers []*pgx.Conn // read mode: one session per node
	next    int
}

func (c *aqClient) connectWriter(ctx context.Context) error {
	w, gen, err := c.sys.findWriter(ctx, c.stale)
	if err != nil {
		return err
	}
	conn, err := c.sys.connect(ctx, w, false)
	if err != nil {
		c.stale = gen
		return err
	}
	c.conn, c.gen, c.stale = conn, gen, -1
	return nil
}

func (c *aqClient) Write(ctx context.Context, key string, value []byte) error {
	if c.conn == nil || c.conn.IsClosed() {
		if err := c.connectWriter(ctx); err != nil {
			return err
		}
	}
	_, err := c.conn.Exec(ctx, aqUpsert, key, string(value))
	if isNotWriter(err) {
		// Counted as an error; the next write finds the writer again.
		c.stale = c.gen
		closeConn(c.conn)
		c.conn = nil
	}
	return err
}

func (c *aqClient) Read(ctx context.Context, key string) error {
	i := c.next
	c.next = (c.next + 1) % len(c.readers)
	if c.readers[i] == nil || c.readers[i].IsClosed() {
		r, err := c.sys.connect(ctx, i, true)
		if err != nil {
			return err
		}
		c.readers[i] = r
	}
	return aqGet(ctx, c.readers[i], key)
}

func (c *aqClient) Close() {
	if c.conn != nil {
		closeConn(c.conn)
	}
	for _, r := range c.readers {
		if r != nil {
			closeConn(r)
		}
	}
}
