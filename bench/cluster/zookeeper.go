package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper: writes are Sets of znodes /bench/k<i> made in setup, sent to
// whichever server the session is on (a follower forwards them to the
// leader); reads are Gets, which every server answers from its own copy.
type zkSystem struct {
	cfg config
}

const zkRoot = "/bench"

func newZooKeeper(cfg config) *zkSystem {
	if cfg.mode == "ready" {
		// Refused connections are expected while the servers start.
		zkLogger.SetOutput(io.Discard)
	}
	return &zkSystem{cfg: cfg}
}

func zkPath(key string) string { return zkRoot + "/" + key }

var zkLogger = log.New(os.Stderr, "zk: ", log.LstdFlags)

// zkConn is one ZooKeeper session. The client library has no per-call
// timeout, so each call runs in a goroutine that is abandoned when the
// context ends; the session is then closed, which ends the call too, and the
// next call opens a new one.
type zkConn struct {
	servers []string
	timeout time.Duration
	conn    *zk.Conn
}

func (z *zkConn) open(ctx context.Context) error {
	if z.conn != nil {
		return nil
	}
	// The session survives a lost connection for this long; the library
	// drops a connection that has been silent for 2/3 of it.
	c, _, err := zk.Connect(z.servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	for c.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			c.Close()
			return fmt.Errorf("no session with %v: %w", z.servers, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	z.conn = c
	return nil
}

func (z *zkConn) close() {
	if z.conn != nil {
		z.conn.Close()
		z.conn = nil
	}
}

// call runs f on the session, opening one first if needed.
func (z *zkConn) call(ctx context.Context, f func(c *zk.Conn) error) error {
	if err := z.open(ctx); err != nil {
		return err
	}
	c := z.conn
	done := make(chan error, 1)
	go func() { done <- f(c) }()
	select {
	case err := <-done:
		if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrSessionExpired) {
			z.close()
		}
		return err
	case <-ctx.Done():
		z.close()
		return ctx.Err()
	}
}

func (z *zkConn) get(ctx context.Context, path string) error {
	return z.call(ctx, func(c *zk.Conn) error {
		_, _, err := c.Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			return errMissing
		}
		return err
	})
}

// each calls f with a session on each server alone.
func (s *zkSystem) each(ctx context.Context, f func(ctx context.Context, z *zkConn) error) error {
	for _, ep := range s.cfg.endpoints {
		z := &zkConn{servers: []string{ep}, timeout: s.cfg.opTimeout}
		err := f(ctx, z)
		z.close()
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
	}
	return nil
}

// put creates path with data, or sets it if it exists.
func put(c *zk.Conn, path string, data []byte) error {
	_, err := c.Set(path, data, -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = c.Create(path, data, 0, zk.WorldACL(zk.PermAll))
	}
	return err
}

func (s *zkSystem) Ready(ctx context.Context) error {
	z := &zkConn{servers: s.cfg.endpoints, timeout: s.cfg.opTimeout}
	err := z.call(ctx, func(c *zk.Conn) error { return put(c, zkRoot, nil) })
	z.close()
	if err != nil {
		return err
	}
	return s.each(ctx, func(ctx context.Context, z *zkConn) error { return z.get(ctx, zkRoot) })
}

func (s *zkSystem) Setup(ctx context.Context, keys int, value []byte) error {
	z := &zkConn{servers: s.cfg.endpoints, timeout: s.cfg.opTimeout}
	defer z.close()
	// 100 znodes per multi-op: sets if they exist (an earlier run), else
	// creates, else one at a time.
	const batch = 100
	for lo := 0; lo < keys; lo += batch {
		var sets, creates []any
		for i := lo; i < min(lo+batch, keys); i++ {
			p := zkPath(keyName(i))
			sets = append(sets, &zk.SetDataRequest{Path: p, Data: value, Version: -1})
			creates = append(creates, &zk.CreateRequest{Path: p, Data: value, Acl: zk.WorldACL(zk.PermAll)})
		}
		err := retry(ctx, func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			return z.call(tctx, func(c *zk.Conn) error {
				if _, err := c.Multi(sets...); err == nil {
					return nil
				}
				if _, err := c.Multi(creates...); err == nil {
					return nil
				}
				for i := lo; i < min(lo+batch, keys); i++ {
					if err := put(c, zkPath(keyName(i)), value); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
	}
	last := zkPath(keyName(keys - 1))
	return s.each(ctx, func(ctx context.Context, z *zkConn) error {
		return retry(ctx, func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			return z.get(tctx, last)
		})
	})
}

func (s *zkSystem) NewClient(ctx context.Context, id int) (Client, error) {
	c := &zkClient{}
	if s.cfg.mode == "write" {
		c.conns = []*zkConn{{servers: s.cfg.endpoints, timeout: s.cfg.opTimeout}}
	} else {
		for _, ep := range s.cfg.endpoints {
			c.conns = append(c.conns, &zkConn{servers: []string{ep}, timeout: s.cfg.opTimeout})
		}
	}
	for _, z := range c.conns {
		if err := z.open(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.next = id % len(c.conns)
	return c, nil
}

func (s *zkSystem) Close() {}

type zkClient struct {
	conns []*zkConn
	next  int
}

func (c *zkClient) Write(ctx context.Context, key string, value []byte) error {
	return c.conns[0].call(ctx, func(zc *zk.Conn) error {
		_, err := zc.Set(zkPath(key), value, -1)
		return err
	})
}

func (c *zkClient) Read(ctx context.Context, key string) error {
	z := c.conns[c.next]
	c.next = (c.next + 1) % len(c.conns)
	return z.get(ctx, zkPath(key))
}

func (c *zkClient) Close() {
	for _, z := range c.conns {
		z.close()
	}
}
