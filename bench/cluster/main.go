// Command clusterbench runs the same write or read workload against a
// three-node etcd, ZooKeeper or Aqueduct cluster and reports throughput and
// latency. See README.md in this directory.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// System is one replicated store under test.
type System interface {
	// Ready returns nil once the cluster takes a write and every endpoint
	// answers a read. It is tried again until the setup deadline.
	Ready(ctx context.Context) error
	// Setup makes every key k0..k<keys-1> hold value and returns once every
	// endpoint can read the last of them. It is not timed.
	Setup(ctx context.Context, keys int, value []byte) error
	// NewClient opens the connections of one benchmark client.
	NewClient(ctx context.Context, id int) (Client, error)
	Close()
}

// Client is one benchmark client. Its methods are called from one goroutine.
type Client interface {
	// Write stores value under key so that it is durable on a majority.
	Write(ctx context.Context, key string, value []byte) error
	// Read reads key from the client's next endpoint (round-robin), without
	// asking the leader. A key that is not found is an error.
	Read(ctx context.Context, key string) error
	Close()
}

var errMissing = errors.New("key not found")

type config struct {
	system       string
	mode         string
	endpoints    []string
	clients      int
	duration     time.Duration
	warmup       time.Duration
	valueBytes   int
	keys         int
	opTimeout    time.Duration
	setupTimeout time.Duration
	aqConsist    string
	jsonPath     string
	seed         uint64
}

// Result is what one run writes to -json.
type Result struct {
	System     string  `json:"system"`
	Mode       string  `json:"mode"`
	Clients    int     `json:"clients"`
	ValueBytes int     `json:"value_bytes"`
	DurationS  float64 `json:"duration_s"`
	Ops        int64   `json:"ops"`
	OpsPerS    float64 `json:"ops_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Errors     int64   `json:"errors"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	var endpoints string
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	fs.StringVar(&cfg.system, "system", "", "etcd, zookeeper or aqueduct")
	fs.StringVar(&cfg.mode, "mode", "write", "write, read, or ready (wait until the cluster takes a write, then exit)")
	fs.StringVar(&endpoints, "endpoints", "", "comma-separated host:port of every node (etcd: client URLs or host:port; aqueduct: PostgreSQL ports)")
	fs.IntVar(&cfg.clients, "clients", 16, "concurrent clients")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "measured time")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "time the clients run before measuring starts")
	fs.IntVar(&cfg.valueBytes, "value-bytes", 179, "bytes per value")
	fs.IntVar(&cfg.keys, "keys", 10000, "number of keys; each op picks one uniformly")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", 5*time.Second, "timeout of each operation and connection attempt")
	fs.DurationVar(&cfg.setupTimeout, "setup-timeout", 120*time.Second, "timeout of the untimed setup (waiting for the cluster, loading the keys)")
	fs.StringVar(&cfg.aqConsist, "aqueduct-read-consistency", "eventual", "aqueduct.consistency for Aqueduct reads (empty: the server's default)")
	fs.StringVar(&cfg.jsonPath, "json", "", "write the result to this file")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the key and value generator")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.endpoints = append(cfg.endpoints, e)
		}
	}
	switch {
	case cfg.system != "etcd" && cfg.system != "zookeeper" && cfg.system != "aqueduct":
		return cfg, fmt.Errorf("-system must be etcd, zookeeper or aqueduct, not %q", cfg.system)
	case cfg.mode != "write" && cfg.mode != "read" && cfg.mode != "ready":
		return cfg, fmt.Errorf("-mode must be write, read or ready, not %q", cfg.mode)
	case len(cfg.endpoints) == 0:
		return cfg, errors.New("-endpoints is empty")
	case cfg.clients < 1 || cfg.keys < 1 || cfg.valueBytes < 1:
		return cfg, errors.New("-clients, -keys and -value-bytes must be positive")
	case cfg.duration <= 0 || cfg.opTimeout <= 0 || cfg.setupTimeout <= 0 || cfg.warmup < 0:
		return cfg, errors.New("-duration, -op-timeout and -setup-timeout must be positive")
	}
	return cfg, nil
}

func newSystem(cfg config) System {
	switch cfg.system {
	case "etcd":
		return newEtcd(cfg)
	case "zookeeper":
		return newZooKeeper(cfg)
	default:
		return newAqueduct(cfg)
	}
}

func run(cfg config) error {
	sys := newSystem(cfg)
	defer sys.Close()

	setupCtx, cancel := context.WithTimeout(context.Background(), cfg.setupTimeout)
	defer cancel()
	if err := waitReady(setupCtx, sys, cfg.opTimeout); err != nil {
		return fmt.Errorf("%s not ready within %s: %w", cfg.system, cfg.setupTimeout, err)
	}
	if cfg.mode == "ready" {
		fmt.Printf("%s: ready\n", cfg.system)
		return nil
	}

	rng := rand.New(rand.NewPCG(cfg.seed, 0))
	value := randomValue(rng, cfg.valueBytes)
	t0 := time.Now()
	if err := sys.Setup(setupCtx, cfg.keys, value); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%s: loaded %d keys in %.1f s\n", cfg.system, cfg.keys, time.Since(t0).Seconds())

	clients := make([]Client, cfg.clients)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range clients {
		c, err := sys.NewClient(setupCtx, i)
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		clients[i] = c
	}

	res := measure(cfg, clients)
	fmt.Printf("%s %s: clients %d, %d ops in %.1f s, %.0f ops/s, p50 %.2f ms, p99 %.2f ms, errors %d\n",
		res.System, res.Mode, res.Clients, res.Ops, res.DurationS, res.OpsPerS, res.P50Ms, res.P99Ms, res.Errors)
	if cfg.jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitReady calls sys.Ready until it succeeds or ctx ends.
func waitReady(ctx context.Context, sys System, tryTimeout time.Duration) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := sys.Ready(tctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// measure runs the clients for warmup + duration. Only operations that start
// after the warm-up are counted; an operation under way at the end finishes
// and counts, and the elapsed time runs until the last one has finished.
func measure(cfg config, clients []Client) Result {
	start := time.Now()
	measureFrom := start.Add(cfg.warmup)
	end := measureFrom.Add(cfg.duration)

	var errCount atomic.Int64
	var logged atomic.Int32
	lats := make([][]time.Duration, len(clients))
	finished := make([]time.Time, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)+1))
			buf := randomValue(rng, cfg.valueBytes)
			var seq uint64
			for {
				begin := time.Now()
				if !begin.Before(end) {
					break
				}
				key := keyName(rng.IntN(cfg.keys))
				ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
				var err error
				if cfg.mode == "write" {
					seq++
					stamp(buf, seq)
					err = c.Write(ctx, key, buf)
				} else {
					err = c.Read(ctx, key)
				}
				cancel()
				done := time.Now()
				counted := !begin.Before(measureFrom)
				if err != nil {
					if counted {
						errCount.Add(1)
					}
					if logged.Add(1) <= 5 {
						fmt.Fprintf(os.Stderr, "%s %s: client %d: %v\n", cfg.system, cfg.mode, i, err)
					}
					// Do not spin on a failing node.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if counted {
					lats[i] = append(lats[i], done.Sub(begin))
				}
			}
			finished[i] = time.Now()
		}()
	}
	wg.Wait()

	last := measureFrom
	var all []time.Duration
	for i := range clients {
		if finished[i].After(last) {
			last = finished[i]
		}
		all = append(all, lats[i]...)
	}
	slices.Sort(all)
	elapsed := last.Sub(measureFrom).Seconds()
	return Result{
		System:     cfg.system,
		Mode:       cfg.mode,
		Clients:    cfg.clients,
		ValueBytes: cfg.valueBytes,
		DurationS:  round(elapsed, 3),
		Ops:        int64(len(all)),
		OpsPerS:    round(float64(len(all))/elapsed, 1),
		P50Ms:      round(percentileMs(all, 0.50), 3),
		P99Ms:      round(percentileMs(all, 0.99), 3),
		Errors:     errCount.Load(),
	}
}

// percentileMs is the nearest-rank percentile of sorted latencies, in ms.
func percentileMs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// randomValue returns n printable bytes, so that the same value can be stored
// as text in Aqueduct.
func randomValue(rng *rand.Rand, n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return b
}

// stamp writes seq in hex at the start of value, so that successive writes
// of one client differ.
func stamp(value []byte, seq uint64) {
	var raw [8]byte
	for i := range raw {
		raw[i] = byte(seq >> (56 - 8*i))
	}
	if len(value) >= 2*len(raw) {
		hex.Encode(value, raw[:])
	}
}

// keyName is the name of key i in every system.
func keyName(i int) string { return fmt.Sprintf("k%d", i) }

// retry calls f until it succeeds or ctx ends, pausing between tries.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
