// Command ceiling replays a plan of Kubernetes API requests against the test bed's kube-apiservers at full
// concurrency and reports the rate they sustain: the ceiling a dispatcher on this bed and machine can approach.
//
// The plan (JSON, written by bench/ceiling.py) holds, per cluster, the address and credentials; per object, the
// requests one dispatch of it makes, in order; and the watches held open meanwhile (their events cost the API
// servers too). Objects are replayed side by side by -concurrency goroutines, each object's requests one after the
// other (a dispatch's steps depend on each other). Go's transport speaks HTTP/2 to the API servers: one multiplexed
// connection per cluster, as client-go does, so the client side costs little.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type cluster struct {
	Server string `json:"server"`
	CA     string `json:"ca"`   // PEM file
	Cert   string `json:"cert"` // PEM file
	Key    string `json:"key"`  // PEM file
}

type request struct {
	Cluster     string          `json:"cluster"`
	Method      string          `json:"method"`
	Path        string          `json:"path"`
	ContentType string          `json:"contentType,omitempty"`
	Body        json.RawMessage `json:"body,omitempty"`
	Step        string          `json:"step"` // "<verb> <resource>" as the audit log names it
}

type plan struct {
	Clusters map[string]cluster `json:"clusters"`
	Watches  []request          `json:"watches"`
	Objects  [][]request        `json:"objects"`
}

type result struct {
	Objects       int            `json:"objects"`
	Requests      int64          `json:"requests"`
	Seconds       float64        `json:"seconds"`
	ObjectsPerS   float64        `json:"objects_per_s"`
	RequestsPerS  float64        `json:"requests_per_s"`
	Concurrency   int            `json:"concurrency"`
	Codes         map[string]int `json:"codes"`
	Errors        int64          `json:"transport_errors"`
	FirstError    string         `json:"first_error,omitempty"`
	LatencyP50Ms  float64        `json:"request_latency_p50_ms"`
	LatencyP99Ms  float64        `json:"request_latency_p99_ms"`
	WatchesOpened int            `json:"watches_opened"`
	Protocols     map[string]int `json:"protocols"`
}

func client(c cluster) (*http.Client, error) {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", c.CA)
	}
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}},
		ForceAttemptHTTP2: true,
		IdleConnTimeout:   90 * time.Second,
	}
	return &http.Client{Transport: transport, Timeout: 60 * time.Second}, nil
}

type recorder struct {
	mu        sync.Mutex
	codes     map[string]int
	protocols map[string]int
	latencies []time.Duration
	errors    atomic.Int64
	first     string
	requests  atomic.Int64
}

func (r *recorder) do(ctx context.Context, clients map[string]*http.Client, servers map[string]string, q request) {
	req, err := http.NewRequestWithContext(ctx, q.Method, servers[q.Cluster]+q.Path, bytes.NewReader(q.Body))
	if err != nil {
		r.fail(err)
		return
	}
	req.Header.Set("Accept", "application/json")
	if q.ContentType != "" {
		req.Header.Set("Content-Type", q.ContentType)
	}
	start := time.Now()
	resp, err := clients[q.Cluster].Do(req)
	r.requests.Add(1)
	if err != nil {
		r.fail(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	elapsed := time.Since(start)
	r.mu.Lock()
	r.codes[fmt.Sprintf("%s %d", q.Step, resp.StatusCode)]++
	r.protocols[resp.Proto]++
	r.latencies = append(r.latencies, elapsed)
	r.mu.Unlock()
}

func (r *recorder) fail(err error) {
	r.errors.Add(1)
	r.mu.Lock()
	if r.first == "" {
		r.first = err.Error()
	}
	r.mu.Unlock()
}

func watch(ctx context.Context, c *http.Client, server string, q request, opened *atomic.Int64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+q.Path, nil)
	if err != nil {
		return
	}
	resp, err := c.Do(req)
	if err != nil {
		return
	}
	opened.Add(1)
	_, _ = io.Copy(io.Discard, resp.Body) // until the replay ends (ctx cancelled)
	_ = resp.Body.Close()
}

func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(p*float64(len(sorted)-1))].Microseconds()) / 1000
}

func run(p plan, concurrency int) (result, error) {
	clients, servers := map[string]*http.Client{}, map[string]string{}
	for name, c := range p.Clusters {
		cl, err := client(c)
		if err != nil {
			return result{}, fmt.Errorf("cluster %s: %w", name, err)
		}
		clients[name], servers[name] = cl, c.Server
	}
	ctx, cancel := context.WithCancel(context.Background())
	var opened atomic.Int64
	var watchers sync.WaitGroup
	for _, w := range p.Watches {
		watchers.Add(1)
		go func() { defer watchers.Done(); watch(ctx, clients[w.Cluster], servers[w.Cluster], w, &opened) }()
	}
	deadline := time.Now().Add(10 * time.Second) // the watches open before the clock starts
	for int(opened.Load()) < len(p.Watches) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rec := &recorder{codes: map[string]int{}, protocols: map[string]int{}}
	next := make(chan int)
	var workers sync.WaitGroup
	start := time.Now()
	for range concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range next {
				for _, q := range p.Objects[i] {
					rec.do(ctx, clients, servers, q)
				}
			}
		}()
	}
	for i := range p.Objects {
		next <- i
	}
	close(next)
	workers.Wait()
	seconds := time.Since(start).Seconds()
	cancel()
	watchers.Wait()
	sort.Slice(rec.latencies, func(a, b int) bool { return rec.latencies[a] < rec.latencies[b] })
	return result{
		Objects: len(p.Objects), Requests: rec.requests.Load(), Seconds: seconds,
		ObjectsPerS: float64(len(p.Objects)) / seconds, RequestsPerS: float64(rec.requests.Load()) / seconds,
		Concurrency: concurrency, Codes: rec.codes, Errors: rec.errors.Load(), FirstError: rec.first,
		LatencyP50Ms: percentile(rec.latencies, 0.5), LatencyP99Ms: percentile(rec.latencies, 0.99),
		WatchesOpened: int(opened.Load()), Protocols: rec.protocols,
	}, nil
}

func main() {
	planFile := flag.String("plan", "", "the plan (JSON) to replay")
	concurrency := flag.Int("concurrency", 64, "objects replayed side by side")
	flag.Parse()
	data, err := os.ReadFile(*planFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(2)
	}
	var p plan
	if err := json.Unmarshal(data, &p); err != nil {
		fmt.Fprintln(os.Stderr, "ceiling: plan:", err)
		os.Exit(2)
	}
	r, err := run(p, *concurrency)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(2)
	}
	out, _ := json.MarshalIndent(r, "", "  ")
	fmt.Println(string(out))
}
