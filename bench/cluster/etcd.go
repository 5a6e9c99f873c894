package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd: writes are Puts through a client that knows every endpoint (a
// follower forwards them to the leader); reads are serializable Gets, served
// by the node asked without a round trip to the leader.
type etcdSystem struct {
	cfg       config
	endpoints []string
}

func newEtcd(cfg config) *etcdSystem {
	eps := make([]string, len(cfg.endpoints))
	for i, e := range cfg.endpoints {
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		eps[i] = e
	}
	return &etcdSystem{cfg: cfg, endpoints: eps}
}

func (s *etcdSystem) dial(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:         endpoints,
		DialTimeout:       s.cfg.opTimeout,
		DialKeepAliveTime: 10 * time.Second,
		Logger:            zap.NewNop(),
	})
}

// each calls f with a client of each endpoint alone.
func (s *etcdSystem) each(ctx context.Context, f func(ctx context.Context, c *clientv3.Client) error) error {
	for _, ep := range s.endpoints {
		c, err := s.dial([]string{ep})
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
		err = f(ctx, c)
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", ep, err)
		}
	}
	return nil
}

func serializableGet(ctx context.Context, c *clientv3.Client, key string) error {
	resp, err := c.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	if resp.Count == 0 {
		return errMissing
	}
	return nil
}

func (s *etcdSystem) Ready(ctx context.Context) error {
	c, err := s.dial(s.endpoints)
	if err != nil {
		return err
	}
	_, err = c.Put(ctx, "clusterbench-ready", "1")
	c.Close()
	if err != nil {
		return err
	}
	return s.each(ctx, func(ctx context.Context, c *clientv3.Client) error {
		return serializableGet(ctx, c, "clusterbench-ready")
	})
}

func (s *etcdSystem) Setup(ctx context.Context, keys int, value []byte) error {
	c, err := s.dial(s.endpoints)
	if err != nil {
		return err
	}
	defer c.Close()
	// 100 puts per transaction; the server allows 128 by default.
	const batch = 100
	for lo := 0; lo < keys; lo += batch {
		var ops []clientv3.Op
		for i := lo; i < min(lo+batch, keys); i++ {
			ops = append(ops, clientv3.OpPut(keyName(i), string(value)))
		}
		err := retry(ctx, func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			_, err := c.Txn(tctx).Then(ops...).Commit()
			return err
		})
		if err != nil {
			return err
		}
	}
	last := keyName(keys - 1)
	return s.each(ctx, func(ctx context.Context, c *clientv3.Client) error {
		return retry(ctx, func(ctx context.Context) error {
			tctx, cancel := context.WithTimeout(ctx, s.cfg.opTimeout)
			defer cancel()
			return serializableGet(tctx, c, last)
		})
	})
}

func (s *etcdSystem) NewClient(ctx context.Context, id int) (Client, error) {
	c := &etcdClient{}
	if s.cfg.mode == "write" {
		w, err := s.dial(s.endpoints)
		if err != nil {
			return nil, err
		}
		c.writer = w
		return c, nil
	}
	for _, ep := range s.endpoints {
		r, err := s.dial([]string{ep})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
		c.readers = append(c.readers, r)
	}
	c.next = id % len(c.readers)
	return c, nil
}

func (s *etcdSystem) Close() {}

type etcdClient struct {
	writer  *clientv3.Client
	readers []*clientv3.Client
	next    int
}

func (c *etcdClient) Write(ctx context.Context, key string, value []byte) error {
	_, err := c.writer.Put(ctx, key, string(value))
	return err
}

func (c *etcdClient) Read(ctx context.Context, key string) error {
	r := c.readers[c.next]
	c.next = (c.next + 1) % len(c.readers)
	return serializableGet(ctx, r, key)
}

func (c *etcdClient) Close() {
	if c.writer != nil {
		c.writer.Close()
	}
	for _, r := range c.readers {
		r.Close()
	}
}
