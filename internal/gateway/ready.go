package gateway

import (
	"context"
	"errors"
	"sync"
	"time"
)

// readyCache remembers the last broker check for readyFor, so that a storm
// of probes is not a storm of broker requests.
type readyCache struct {
	mu  sync.Mutex
	at  time.Time // wall clock of the last check; zero before the first
	err error
}

// readyFor is how long a broker check answers /readyz.
const readyFor = time.Second

// ErrBrokerUnreachable is Ready's error when no broker answered within
// KafkaTimeout.
var ErrBrokerUnreachable = errors.New("gateway: no Kafka broker answered")

// Ready reports whether the gateway can serve: a Kafka broker answers its
// client within KafkaTimeout. A readiness probe calls it (cmd's /readyz), so
// that a gateway cut off from Kafka, which can only answer 503, is taken
// out of its load balancer until the broker is back. The answer is reused
// for a second; no lock is held while the broker is asked.
func (g *Gateway) Ready(ctx context.Context) error {
	c := &g.ready
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < readyFor {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.KafkaTimeout)
	defer cancel()
	err := g.cl.Ping(ctx)
	if err != nil {
		g.cfg.Logger.Warn("gateway: not ready: no Kafka broker answered", "err", err)
		err = ErrBrokerUnreachable
	}
	c.mu.Lock()
	c.at, c.err = time.Now(), err
	c.mu.Unlock()
	return err
}
